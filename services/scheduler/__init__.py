"""The scheduler service: a Faust app running the pure core (see `app` for the scale note)."""

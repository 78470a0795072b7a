"""`python -m services.scheduler worker -l warn` runs one scheduler worker."""

from services.scheduler.app import create_app

app = create_app()

if __name__ == "__main__":
    app.main()

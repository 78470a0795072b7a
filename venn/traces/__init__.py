"""Device profiles and check-in traces (synthetic and FedScale) for simulation."""

"""Device fleet emulator: replays a check-in trace against the pipeline."""

from services.devices.fleet import DeviceFleet, FleetStats, run_devices, synthetic_source

__all__ = ["DeviceFleet", "FleetStats", "run_devices", "synthetic_source"]

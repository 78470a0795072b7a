"""Device gateway: devices check in over HTTP; the gateway speaks Kafka for them.

Its options are the gateway section of the one settings object
(`venn.settings.GatewaySettings`, `settings.gateway`)."""

from services.gateway.app import GatewayServer, create_app, run_gateway

__all__ = ["GatewayServer", "create_app", "run_gateway"]

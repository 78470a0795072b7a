"""Device gateway: devices check in over HTTP; the gateway speaks Kafka for them."""

from services.gateway.app import GatewayServer, create_app, run_gateway
from services.gateway.config import GatewayConfig

__all__ = ["GatewayConfig", "GatewayServer", "create_app", "run_gateway"]

"""A SuperNode as a Venn device: its id, attributes and capacity hints, read from the node
config Flower hands every ClientApp (``--node-config``), so the node's check-ins and its
ClientApps agree on who it is.

Keys (Flower's ``key=value`` syntax, parsed by Flower's own parser):

- ``device-id='d3'``: the node's Venn device id (required);
- ``attr.<name>=<number>``: an attribute requirements are matched against
  (``attr.cpu_f=4 attr.ram=8``);
- ``speed-ms=<ms per sample>`` and ``bandwidth-kbps=<kbps>``: the capacity hints of a
  check-in (defaults below).

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEVICE_ID_KEY = "device-id"
ATTR_PREFIX = "attr."
SPEED_KEY = "speed-ms"
BANDWIDTH_KEY = "bandwidth-kbps"
DEFAULT_SPEED_MS = 10.0
DEFAULT_BANDWIDTH_KBPS = 10_000.0


class NodeConfigError(ValueError):
    """A node config that does not describe a Venn device."""


def _number(config: Mapping[str, Any], key: str, default: float | None = None) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise NodeConfigError(f"node config {key}={value!r}: expected a finite number")
    return float(value)


@dataclass(frozen=True)
class NodeProfile:
    device_id: str
    attrs: dict[str, float] = field(default_factory=dict)
    speed_ms_per_sample: float = DEFAULT_SPEED_MS
    bandwidth_kbps: float = DEFAULT_BANDWIDTH_KBPS

    @classmethod
    def from_node_config(cls, config: Mapping[str, Any]) -> NodeProfile:
        """The profile in a parsed node config; NodeConfigError says what is wrong."""
        device_id = config.get(DEVICE_ID_KEY)
        if not isinstance(device_id, str) or not device_id:
            raise NodeConfigError(
                f"node config needs {DEVICE_ID_KEY}='<id>' (a string), got {device_id!r}"
            )
        attrs = {
            key[len(ATTR_PREFIX) :]: _number(config, key)
            for key in config
            if key.startswith(ATTR_PREFIX)
        }
        if any(not name for name in attrs):
            raise NodeConfigError(f"node config: {ATTR_PREFIX}<name> needs a name")
        return cls(
            device_id=device_id,
            attrs=attrs,
            speed_ms_per_sample=_number(config, SPEED_KEY, DEFAULT_SPEED_MS),
            bandwidth_kbps=_number(config, BANDWIDTH_KEY, DEFAULT_BANDWIDTH_KBPS),
        )

    def checkin_body(self) -> dict[str, Any]:
        """The body of this node's `POST /v1/checkin`."""
        return {
            "device_id": self.device_id,
            "attrs": self.attrs,
            "speed_ms_per_sample": self.speed_ms_per_sample,
            "bandwidth_kbps": self.bandwidth_kbps,
        }

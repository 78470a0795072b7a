"""A SuperNode as a Venn device: its name, attributes and capacity hints, read from the node
config Flower hands every ClientApp (``--node-config``), so the node's check-ins and its
ClientApps agree on what it is; and the Venn device id of one SuperNode's life.

Keys (Flower's ``key=value`` syntax):

- ``device-id='d3'``: the node's name (required);
- ``attr.<name>=<number>``: an attribute requirements are matched against
  (``attr.cpu_f=4 attr.ram=8``);
- ``speed-ms=<ms per sample>`` and ``bandwidth-kbps=<kbps>``: the capacity hints of a
  check-in (defaults below).

The Venn device id of a node is ``<name>@<Flower node id>`` when its launcher enrols it:
the ServerApp reads the node id straight from the assignment, with no question to the node,
and a restarted SuperNode (a new node id) is a new device that Venn cannot confuse with the
old one. A node checking in under a fixed device token keeps its plain name, which the
ServerApp finds among the SuperLink's node names (secure mode: `flwr supernode register
--name`).

Pure: no I/O.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEVICE_ID_KEY = "device-id"
ATTR_PREFIX = "attr."
SPEED_KEY = "speed-ms"
BANDWIDTH_KEY = "bandwidth-kbps"
DEFAULT_SPEED_MS = 10.0
DEFAULT_BANDWIDTH_KBPS = 10_000.0
NODE_SEP = "@"

# Flower's own pattern for --node-config / --run-config pairs (flwr.common.config), so a
# config means the same here as in the SuperNode: quoted values may hold spaces.
_PAIR = re.compile(r"(\S+?)=(\'[^\']*\'|\"[^\"]*\"|\S+)")


class NodeConfigError(ValueError):
    """A node config that does not describe a Venn device."""


def parse_node_config(text: str) -> dict[str, Any]:
    """``"device-id='d1' attr.ram=8"`` -> ``{"device-id": "d1", "attr.ram": 8}``, as Flower
    parses ``--node-config`` (TOML values, dotted keys kept flat)."""
    toml = "\n".join(f"{k} = {v}" for k, v in _PAIR.findall(text))
    try:
        data = tomllib.loads(toml)
    except tomllib.TOMLDecodeError as exc:
        raise NodeConfigError(f"node config {text!r}: {exc}") from None
    return _flatten(data)


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _number(config: Mapping[str, Any], key: str, default: float | None = None) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise NodeConfigError(f"node config {key}={value!r}: expected a finite number")
    return float(value)


@dataclass(frozen=True)
class NodeProfile:
    device_id: str
    """The node's name (``device-id`` in its node config)."""
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
        if NODE_SEP in device_id or any(c.isspace() for c in device_id):
            raise NodeConfigError(
                f"node config {DEVICE_ID_KEY}={device_id!r}: no spaces and no {NODE_SEP!r}"
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

    def checkin_body(self, device_id: str | None = None) -> dict[str, Any]:
        """The body of this node's `POST /v1/checkin` (as ``device_id`` when given)."""
        return {
            "device_id": device_id or self.device_id,
            "attrs": self.attrs,
            "speed_ms_per_sample": self.speed_ms_per_sample,
            "bandwidth_kbps": self.bandwidth_kbps,
        }

    def meets(self, requirement: Mapping[str, float]) -> bool:
        """True iff every ``attribute >= minimum`` of ``requirement`` holds (Venn's rule)."""
        return all(self.attrs.get(name, -math.inf) >= low for name, low in requirement.items())


def venn_device_id(name: str, node_id: int) -> str:
    """The Venn device id of SuperNode ``node_id`` named ``name``."""
    return f"{name}{NODE_SEP}{node_id}"


def split_device_id(device_id: str) -> tuple[str, int | None]:
    """(name, Flower node id or None) of a Venn device id."""
    name, sep, node = device_id.rpartition(NODE_SEP)
    if sep and name and node.isdigit():
        return name, int(node)
    return device_id, None


def device_name(device_id: str) -> str:
    """The node's name in a Venn device id (``d3@123`` -> ``d3``)."""
    return split_device_id(device_id)[0]

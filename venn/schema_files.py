"""Keep the value bounds of `schemas/*.json` equal to the event models' (`venn.fields`).

The schema files are the published contract (with descriptions); the models are where
bounds are decided. `python -m venn.schema_files --write` copies every bound keyword from
the models into the files; tests/pure/test_events.py checks there is nothing to copy.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import msgspec

from venn.events import EVENT_TYPES, Event, schema_path

BOUND_KEYWORDS = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "maxProperties",
    "maxItems",
    "propertyNames",
    "additionalProperties",
)


def model_bounds(event_type: type[Event]) -> dict[str, dict[str, Any]]:
    """Per property, the bound keywords of the model's own JSON Schema (msgspec's)."""
    generated = msgspec.json.schema(event_type)
    props = generated["$defs"][event_type.__name__]["properties"]
    result: dict[str, dict[str, Any]] = {}
    for name, prop in props.items():
        if "anyOf" in prop:  # an optional field: the non-null branch carries the bounds
            prop = next(p for p in prop["anyOf"] if p.get("type") != "null")
        bounds = {k: prop[k] for k in BOUND_KEYWORDS if k in prop}
        if prop.get("type") == "array" and "$ref" not in prop.get("items", {}):
            bounds["items"] = prop["items"]
        result[name] = bounds
    return result


def file_bounds(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: {k: prop[k] for k in (*BOUND_KEYWORDS, "items") if k in prop}
        for name, prop in schema["properties"].items()
        if name != "type"
    }


def differences() -> list[str]:
    """Where a schema file's bounds differ from its model's."""
    found = []
    for event_type in EVENT_TYPES:
        schema = json.loads(schema_path(event_type).read_text())
        have = file_bounds(schema)
        for name, want in model_bounds(event_type).items():
            if name == "type":
                continue
            got = {k: v for k, v in have.get(name, {}).items() if k != "items" or "items" in want}
            if got != want:
                found.append(f"{event_type.type_name()}.{name}: file {got} != model {want}")
    return found


def write() -> list[str]:
    """Copy the models' bounds into the schema files. Returns the files changed."""
    changed = []
    for event_type in EVENT_TYPES:
        path = schema_path(event_type)
        schema = json.loads(path.read_text())
        before = json.dumps(schema)
        for name, want in model_bounds(event_type).items():
            prop = schema["properties"].get(name)
            if prop is None or name == "type":
                continue
            for key in BOUND_KEYWORDS:
                prop.pop(key, None)
            if "items" in want:
                prop.pop("items", None)
            description = prop.pop("description", None)
            prop.update(want)
            if description is not None:
                prop["description"] = description  # last, as in the rest of the files
        if json.dumps(schema) != before:
            path.write_text(json.dumps(schema, indent=2, ensure_ascii=False) + "\n")
            changed.append(path.name)
    return changed


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m venn.schema_files", description=__doc__)
    parser.add_argument("--write", action="store_true", help="update the files")
    args = parser.parse_args()
    if args.write:
        print("\n".join(write()) or "nothing to change")
    else:
        diffs = differences()
        print("\n".join(diffs) or "schemas agree with the models")
        raise SystemExit(1 if diffs else 0)


if __name__ == "__main__":
    main()

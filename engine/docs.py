"""Module documentation generated from each module's JSON Schema."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from engine.registry import ModuleSpec


def _type_of(prop: Mapping[str, Any]) -> str:
    if "type" in prop:
        kind = prop["type"]
        return "|".join(kind) if isinstance(kind, list) else str(kind)
    for key in ("anyOf", "oneOf"):
        if key in prop:
            return "|".join(_type_of(p) for p in prop[key])
    return "any"


def argument_rows(spec: ModuleSpec) -> list[dict[str, str]]:
    schema = spec.schema
    required = set(schema.get("required", []))
    rows = []
    for name, prop in schema.get("properties", {}).items():
        choices = prop.get("enum")
        rows.append(
            {
                "name": name,
                "type": _type_of(prop),
                "required": "yes" if name in required else "no",
                "default": json.dumps(prop["default"]) if "default" in prop else "",
                "choices": ", ".join(json.dumps(c) for c in choices) if choices else "",
                "description": prop.get("description", ""),
            }
        )
    return rows


def render_text(spec: ModuleSpec) -> str:
    lines = [f"{spec.name}: {spec.summary}", ""]
    body = spec.doc.split("\n", 1)[1].strip() if "\n" in spec.doc else ""
    if body:
        lines += [body, ""]
    check = {
        "plan": "predicts its changes (plan)",
        "skip": "skipped (cannot predict)",
        "read-only": "runs (read-only: touches nothing)",
    }
    lines.append(f"check mode: {check[spec.check_mode]}")
    if spec.free_form:
        lines.append(f"free form: a string argument is taken as '{spec.free_form}'")
    lines += ["", "ARGUMENTS"]
    rows = argument_rows(spec)
    if not rows:
        lines.append(f"  {spec.schema.get('description', '(free mapping)')}")
    for row in rows:
        extra = [f"type: {row['type']}"]
        if row["required"] == "yes":
            extra.append("required")
        if row["default"]:
            extra.append(f"default: {row['default']}")
        if row["choices"]:
            extra.append(f"choices: {row['choices']}")
        lines.append(f"  {row['name']} ({', '.join(extra)})")
        lines.append(f"      {row['description']}")
    return "\n".join(lines) + "\n"


def render_markdown(spec: ModuleSpec) -> str:
    lines = [f"### `{spec.name}`", "", spec.summary, ""]
    rows = argument_rows(spec)
    if rows:
        lines += ["| argument | type | required | default | description |", "|---|---|---|---|---|"]
        for row in rows:
            desc = row["description"] + (f" Choices: {row['choices']}." if row["choices"] else "")
            lines.append(f"| `{row['name']}` | {row['type']} | {row['required']} | {row['default']} | {desc} |")
    else:
        lines.append(spec.schema.get("description", ""))
    return "\n".join(lines) + "\n"

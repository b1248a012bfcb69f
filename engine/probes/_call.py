"""The typed signature of ``call``, which the probe bootstrap injects into every probe.

A probe that calls another one imports this under ``TYPE_CHECKING`` only: at run time the
name is the bootstrap's ``call`` (engine/probes/__init__.py), and the host never needs
this file.
"""

from __future__ import annotations

from typing import Any


def call(name: str, args: dict[str, Any] | None = None) -> Any:
    raise NotImplementedError("call() is injected by the probe bootstrap")

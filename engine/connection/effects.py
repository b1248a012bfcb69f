"""What a planned change would leave on the host (``Change.effects``), for the predicted
state planning carries forward (engine/connection/predicted.py). Modules import these from
engine.module_api."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Writes:
    """Apply leaves this file with these bytes (``data=None``: known only after apply, as a
    command's output or a download) and, when given, this mode."""

    path: str
    data: bytes | None
    mode: int | None = None


@dataclass(frozen=True)
class Removes:
    """Apply removes this path (a directory with all under it)."""

    path: str


@dataclass(frozen=True)
class Fills:
    """Apply puts what is known only after apply under this directory: a venv's packages,
    a downloaded checkpoint. A later read below it is "known after apply"."""

    path: str
    what: str


@dataclass(frozen=True)
class Stops:
    """Apply stops this process (identity: pid and start time; ``what`` is for the review:
    "vLLM pid 4242 serving kimi-k2.5 on :8000")."""

    pid: int
    start_time: int | None
    what: str


@dataclass(frozen=True)
class Starts:
    """Apply starts this server: its argv, the port it answers on, the state file it keeps."""

    name: str
    argv: tuple[str, ...]
    port: int | None = None
    state_path: str | None = None


Effect = Writes | Removes | Fills | Stops | Starts

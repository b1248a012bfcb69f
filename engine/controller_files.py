"""Files read on the controller (``copy``/``template`` ``src``, ``lookup('file')``,
``include_vars``) as a plan sees them.

On a local connection the controller IS the host: a file an earlier planned task writes
(``write_file`` patching a config) is the very file a later task reads from the
controller. While planning, the executor names the run's predicted host for the task
(``seeing``); these reads then answer from the predicted state first, as the predicted
host answers host-side reads (engine/connection/predicted.py), so a plan that copies a
file an earlier step patches shows the patched content and applies without "drifted".
Over SSH the controller is another machine: its files are read as they are.

A path an earlier task leaves known only after apply is read as it is now, and that read
is noted (the task is then "known after apply"), as for host-side reads.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Protocol


class PredictedFiles(Protocol):
    def predicted_file(self, path: str) -> tuple[bool, bytes | None]:
        """(known, data): known False reads the file as it is; data None: absent."""
        ...


_VIEW: ContextVar[PredictedFiles | None] = ContextVar("rigger_controller_view", default=None)


@contextmanager
def seeing(view: PredictedFiles | None) -> Iterator[None]:
    """Controller-side reads in this block see ``view``'s predicted files (None: as they are)."""
    token = _VIEW.set(view)
    try:
        yield
    finally:
        _VIEW.reset(token)


def _predicted(path: Path) -> tuple[bool, bytes | None]:
    view = _VIEW.get()
    if view is None:
        return False, None
    return view.predicted_file(os.path.abspath(path))


def exists(path: Path) -> bool:
    known, data = _predicted(path)
    return data is not None if known else path.exists()


def is_file(path: Path) -> bool:
    known, data = _predicted(path)
    return data is not None if known else path.is_file()


def is_dir(path: Path) -> bool:
    known, _ = _predicted(path)
    return False if known else path.is_dir()  # a predicted path is a file or absent


def size(path: Path) -> int:
    known, data = _predicted(path)
    if not known:
        return path.stat().st_size
    return len(_present(path, data))


def read_bytes(path: Path) -> bytes:
    known, data = _predicted(path)
    return _present(path, data) if known else path.read_bytes()


def read_text(path: Path) -> str:
    return read_bytes(path).decode("utf-8")


def _present(path: Path, data: bytes | None) -> bytes:
    if data is None:  # an earlier planned task removes it
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
    return data

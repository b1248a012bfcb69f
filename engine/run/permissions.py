"""Permission failures a plan can know before apply (issue 30): a planned write, removal or
fill in a directory the task's user cannot write (a non-root login without ``become``
copying to /etc, apt installing into /var/lib/dpkg).

Judged from what the host answers, never guessed: the task's own connection (its become
applied) asks the kernel, through the path_info probe, whether that user may make entries
in the directory the change writes in. Only the changes rigger makes itself (files, apt,
pip) are judged: a command's (``command``/``shell``/``raw``/``uri``, CHECK_MODE "skip") are
what the command does, which may become root by itself. Only a directory that exists now is judged; one an
earlier step would create (with become, another owner) is left to apply. A task that
becomes root is not asked: root writes where the OS lets anyone.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from engine.connection.base import ScopedConnection
from engine.connection.effects import Effect, Fills, Removes, Writes
from engine.errors import CommandFailed, TaskFailed
from engine.probes import ProbeError

WILL_FAIL = "will fail: permission"


def _directories(effects: Iterable[Effect]) -> list[str]:
    """The directories apply makes or removes entries in: a written or removed path's
    parent (files are replaced by rename), a filled directory itself."""
    found: dict[str, None] = {}
    for effect in effects:
        if isinstance(effect, (Writes, Removes)):
            found.setdefault(posixpath.dirname(posixpath.normpath(effect.path)) or "/", None)
        elif isinstance(effect, Fills):
            found.setdefault(posixpath.normpath(effect.path), None)
    return list(found)


def permission_failure(conn: ScopedConnection, effects: Iterable[Effect]) -> str:
    """``will fail: permission: ...`` naming the directory and the user, or "" when the
    change may be applied as far as the host says (or the host could not say)."""
    if conn.scope.become is True:
        return ""
    directories = _directories(effects)
    if not directories:
        return ""
    try:
        answer = conn.run_probe("path_info", {"paths": directories})
    except (ProbeError, TaskFailed, CommandFailed):  # no answer: nothing is predicted
        return ""
    for directory in directories:
        info = answer["paths"].get(directory, {})
        if info.get("type") == "dir" and info.get("writable") is False:
            who = f"user {conn.scope.become}" if conn.scope.become else "the connection user"
            return (
                f"{WILL_FAIL}: {who} (uid {answer.get('euid', '?')}) cannot write in {directory} "
                f"(owner uid {info.get('uid', '?')}, mode {info.get('mode', '?')}); "
                "add become: true, or choose a path that user can write"
            )
    return ""

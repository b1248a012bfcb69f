"""What the user and group modules share: the account facts probe and running the tools.

Not a task module (no ``plan``): helpers for ``user`` and ``group``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.module_api import ProbeError, TaskContext, TaskFailed

ACCOUNT_NAME = {
    "type": "string",
    "pattern": r"^[A-Za-z0-9_.][A-Za-z0-9_.@-]*\$?$",
    "maxLength": 32,
    "description": "The account's name (letters, digits, _ . @ -; not starting with -).",
}
ACCOUNT_ENV = {"LC_ALL": "C"}


def account_facts(
    ctx: TaskContext,
    users: Sequence[str] = (),
    groups: Sequence[str] = (),
    *,
    password: bool = False,
    dirs: Sequence[str] = (),
) -> dict[str, Any]:
    """One round trip: the named users and groups (None: absent) and whether ``dirs`` exist."""
    request = {"users": list(users), "groups": list(groups), "password": password, "dirs": list(dirs)}
    try:
        return ctx.conn.run_probe("account_facts", request)
    except ProbeError as exc:
        raise TaskFailed(str(exc)) from None


def run_tool(ctx: TaskContext, argv: Sequence[str], stdin: bytes | None = None, hide: str = "") -> None:
    """Run useradd/usermod/... and fail with its own words; ``hide`` never reaches the message."""
    result = ctx.conn.run(list(argv), check=False, stdin=stdin, env=ACCOUNT_ENV)
    if result.rc != 0:
        tail = result.tail()
        if hide:
            tail = tail.replace(hide, "********")
        raise TaskFailed(f"{argv[0]} failed (exit {result.rc}):\n{tail}".rstrip())


def lines(fields: Mapping[str, Any]) -> str:
    """An account as diff text, one ``key: value`` line per field that is set."""
    return "".join(f"{key}: {value}\n" for key, value in fields.items() if value is not None)

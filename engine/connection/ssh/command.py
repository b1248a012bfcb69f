"""Build the one command line sshd runs for an argv, quoting the argv exactly once.

Layout: ``export K=V && cd DIR && exec [sudo ... -- sh -c MARK sh] [timeout ...] argv``.
Environment values travel in the shell line (gone at ``exec``), never in a long-lived
argv: with become they are exported and passed through ``sudo --preserve-env=NAMES``.
Under become, ``sh -c`` prints a marker line first, so the connection can tell "sudo let
us in" from "the command failed" and never confuses a sudo prompt with command output.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine.errors import TaskFailed

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
TIMEOUT_KILL_AFTER_S = 5


@dataclass(frozen=True)
class BecomeMarkers:
    """Per-connection random strings: the sudo prompt and the 'sudo succeeded' line."""

    prompt: str
    success: str

    @classmethod
    def new(cls) -> BecomeMarkers:
        token = secrets.token_hex(8)
        return cls(prompt=f"[rigger-sudo-prompt-{token}]", success=f"rigger-become-ok-{token}")


def command_line(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout_s: float | None = None,
    become: BecomeMarkers | None = None,
    become_password: bool = False,
    become_user: str | None = None,
) -> str:
    if not argv:
        raise TaskFailed("empty command")
    steps: list[str] = []
    names = list(env or {})
    for name in names:
        if not _ENV_NAME.match(name):
            raise TaskFailed(f"invalid environment variable name {name!r}")
    if env:
        steps.append("export " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in env.items()))
    if cwd:
        steps.append(f"cd {shlex.quote(cwd)}")
    full: list[str] = []
    if become is not None:
        full += _sudo_prefix(become, become_password, names, become_user)
    if timeout_s is not None:
        full += ["timeout", "-k", f"{TIMEOUT_KILL_AFTER_S}", f"{max(timeout_s, 0.001):g}"]
    full += list(argv)
    steps.append("exec " + shlex.join(full))
    return " && ".join(steps)


def _sudo_prefix(
    markers: BecomeMarkers, with_password: bool, env_names: list[str], user: str | None = None
) -> list[str]:
    """Root by default; ``user``: that user, as Ansible's sudo becomes one (``-H -u USER``)."""
    mode = ["-S", "-k", "-p", markers.prompt] if with_password else ["-n"]
    target = ["-H", "-u", user] if user else []
    preserve = [f"--preserve-env={','.join(env_names)}"] if env_names else []
    announce = f'printf "%s\\n" {markers.success} && exec "$@"'
    return ["sudo", *target, *mode, *preserve, "--", "sh", "-c", announce, "sh"]

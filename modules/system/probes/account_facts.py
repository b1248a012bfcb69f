"""Local users and groups as the user and group modules compare them; never changes anything.

For a user: uid, primary gid and group name, comment, home (and whether it exists), shell,
the groups listing it as a member, and a sha256 digest of its password field (``!`` locks
stripped) — never the hash itself, so nothing secret leaves the host. ``password_digest``
is None when /etc/shadow cannot be read (no root).
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
from typing import Any

SHADOW = "/etc/shadow"


def _group(name: str) -> Any:
    try:
        return grp.getgrgid(int(name)) if name.isdigit() else grp.getgrnam(name)
    except KeyError:
        return None


def _password_digests() -> dict[str, str] | None:
    try:
        with open(SHADOW, encoding="utf-8", errors="replace") as shadow:
            lines = shadow.read().splitlines()
    except OSError:
        return None
    digests = {}
    for line in lines:
        name, _, rest = line.partition(":")
        digests[name] = hashlib.sha256(rest.split(":", 1)[0].lstrip("!").encode()).hexdigest()
    return digests


def _user(name: str, digests: dict[str, str] | None) -> dict[str, Any] | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    primary = _group(str(entry.pw_gid))
    return {
        "uid": entry.pw_uid,
        "gid": entry.pw_gid,
        "group": primary.gr_name if primary else None,
        "comment": entry.pw_gecos,
        "home": entry.pw_dir,
        "home_exists": os.path.isdir(entry.pw_dir),
        "shell": entry.pw_shell,
        "member_of": sorted(g.gr_name for g in grp.getgrall() if name in g.gr_mem),
        "password_digest": None if digests is None else digests.get(name),
    }


def main(args: dict[str, Any]) -> dict[str, Any]:
    users = args.get("users", [])
    digests = _password_digests() if users and args.get("password") else None
    groups = {}
    for name in args.get("groups", []):
        found = _group(str(name))
        groups[str(name)] = None if found is None else {"name": found.gr_name, "gid": found.gr_gid}
    paths = {path: os.path.isdir(path) for path in args.get("dirs", [])}
    return {"users": {name: _user(name, digests) for name in users}, "groups": groups, "dirs": paths}

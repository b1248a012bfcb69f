"""Set the host's time zone: the /etc/localtime link and /etc/timezone.

community.general's `timezone` (ansible-core routes the bare name to it) for `name`, as it
behaves on a systemd Debian or Ubuntu host, where it asks `timedatectl set-timezone`:
afterwards /etc/localtime is the link `../usr/share/zoneinfo/ZONE` and (Debian's timedated)
/etc/timezone holds `ZONE`. rigger puts both in place itself, through the file primitive
(the link replaced atomically, only while it is still the one the plan saw; the file
written atomically): it does not call timedatectl, which needs a system bus and timedated
running, so rigger sets the zone the same way in a container, a chroot or a host booted
without them. A running program keeps the zone it read at its start (restart cron, as
community.general advises).

The zone currently set is the one the /etc/localtime link names (`/usr/share/zoneinfo/`
or `../usr/share/zoneinfo/` before it, as timedated reads it); when that is the zone asked
for, a different /etc/timezone is what differs (its first word; a host without the file
is not given one). `n/a` when the link names no zone (a copied file, a broken link), as
timedatectl says. The zone must name a zone file on the host: a regular file under
/usr/share/zoneinfo (a root-owned link there to another zone file, such as `UTC` ->
`Etc/UTC`, counts, as the file test community.general makes follows links), starting
with the TZif mark of a compiled zone (tzdata's `zone.tab` is no zone); letters, digits,
`_ + -` in `/`-separated parts, never `..`, a leading `/` or `-`. `hwclock` (whether the
hardware clock keeps local time) is refused by name: it needs `timedatectl set-local-rtc`
and a real clock device, which no test here can reach.

The result carries community.general's `diff` ({before: {name}, after: {name}}; the same
zone twice when nothing changed); its `msg` names what was written, where
community.general's names the timedatectl command it ran. In check mode the change and its
before/after show as rigger's other modules show theirs (`--diff`), with no `diff` data.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from engine.module_api import (
    Change,
    Diff,
    ProbeError,
    Result,
    TaskContext,
    TaskFailed,
    Unchanged,
    Writes,
    content_digest,
)

ZONEINFO = "/usr/share/zoneinfo/"
LOCALTIME = "/etc/localtime"
TIMEZONE_FILE = "/etc/timezone"
LINK_PREFIXES = (ZONEINFO, "../usr/share/zoneinfo/")  # how timedated reads the link
_ZONE = re.compile(r"^[A-Za-z0-9_+][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+)*\Z")
_TZIF = b"TZif"
UNKNOWN = "n/a"

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "anyOf": [{"required": ["name"]}, {"required": ["hwclock"]}, {"required": ["rtc"]}],
    "properties": {
        "name": {"type": "string", "description": "The IANA time zone (`Europe/Paris`, `Etc/UTC`)."},
        "hwclock": {
            "type": "string",
            "enum": ["local", "UTC"],
            "description": "Not implemented: a task that sets it fails, naming it (it needs timedatectl and a "
            "hardware clock).",
        },
        "rtc": {"type": "string", "enum": ["local", "UTC"], "description": "Another name for hwclock; refused too."},
    },
}


def _zone(args: Mapping[str, Any]) -> str:
    for key in ("hwclock", "rtc"):
        if args.get(key) is not None:
            raise TaskFailed(
                f"{key}: rigger's timezone does not set the hardware clock (that needs `timedatectl "
                "set-local-rtc` and a system bus); leave it out, or set it with a command task"
            )
    if args.get("name") is None:
        raise TaskFailed("timezone needs name (hwclock is not implemented)")
    zone = str(args["name"])
    if not _ZONE.match(zone) or ".." in zone.split("/"):
        raise TaskFailed(
            f"{zone!r} is not a time zone name (IANA names: letters, digits, '_', '+', '-' in parts "
            "separated by '/', like Europe/Paris or Etc/UTC; no '..', no leading '/' or '-')"
        )
    return zone


def _facts(ctx: TaskContext, path: str, follow: bool) -> dict[str, Any]:
    request: dict[str, Any] = {"paths": [path], "follow_links": follow}
    try:
        return dict(ctx.conn.run_probe("file_facts", request)["paths"][path])
    except ProbeError as exc:
        raise TaskFailed(str(exc)) from None


def _check_zone_file(ctx: TaskContext, zone: str) -> None:
    """The zone file exists as a compiled zone (community.general: 'is not available')."""
    path = ZONEINFO + zone
    facts = _facts(ctx, path, follow=True)
    real = str(facts.get("path", path))
    usable = facts.get("exists") and facts.get("type") == "file" and real.startswith(ZONEINFO)
    head = ctx.conn.read_file(real) if usable and not facts.get("write_refusal") else None
    if head is None or not head.startswith(_TZIF):
        raise TaskFailed(
            f'given timezone "{zone}" is not available: {path} is no zone file on the host '
            "(install tzdata, or name a zone from `timedatectl list-timezones`)"
        )


def _link_zone(facts: Mapping[str, Any]) -> str | None:
    if facts.get("type") != "link":
        return None
    target = str(facts["link_target"])
    return next((target[len(prefix) :] for prefix in LINK_PREFIXES if target.startswith(prefix)), None)


def _first_word(data: bytes | None) -> str | None:
    words = (data or b"").decode("utf-8", errors="replace").split()
    return words[0] if words else None


def _current(link_zone: str | None, recorded: bytes | None, zone: str) -> str:
    """The zone the host is set to, as the diff's `before` shows it."""
    if link_zone != zone:
        return link_zone or UNKNOWN
    if recorded is not None and _first_word(recorded) != zone:
        return _first_word(recorded) or UNKNOWN
    return zone


def _diff(before: str, after: str) -> dict[str, Any]:
    return {"before": {"name": before}, "after": {"name": after}}


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    zone = _zone(args)
    _check_zone_file(ctx, zone)
    link = _facts(ctx, LOCALTIME, follow=False)
    if link.get("type") == "directory":
        raise TaskFailed(f"{LOCALTIME} is a directory; not replacing it with the zone link (remove it first)")
    recorded = ctx.conn.read_file(TIMEZONE_FILE)
    before = _current(_link_zone(link), recorded, zone)
    if before == zone:
        return Unchanged(f"time zone is already {zone}", {"diff": _diff(zone, zone)})
    diffs, effects = [], []
    target = None
    if _link_zone(link) != zone:
        target = "../usr/share/zoneinfo/" + zone
        now = f"link -> {link['link_target']}" if link.get("type") == "link" else link.get("type", "absent")
        diffs.append(Diff(LOCALTIME, f"{now}\n", f"link -> {target}\n"))
    if recorded is not None and _first_word(recorded) != zone:
        diffs.append(Diff(TIMEZONE_FILE, recorded.decode("utf-8", errors="replace"), f"{zone}\n"))
        effects.append(Writes(TIMEZONE_FILE, f"{zone}\n".encode()))
    fingerprint = {
        f"file:{TIMEZONE_FILE}": content_digest(recorded),
        f"link:{LOCALTIME}": str(link.get("link_target", link.get("type", "absent"))),
    }
    payload = {
        "before": before,
        "target": target,
        "identity": [link["dev"], link["inode"]] if link.get("exists") else None,
        "timezone_file": bool(effects),
    }
    return Change(f"set the time zone to {zone}", tuple(diffs), payload, fingerprint, tuple(effects))


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    zone, payload = _zone(args), change.payload
    written = []
    if payload["target"]:
        op = {"op": "symlink", "path": LOCALTIME, "src": payload["target"], "identity": payload["identity"]}
        try:
            ctx.conn.run_probe("file_set", {"ops": [op]})
        except ProbeError as exc:
            raise TaskFailed(str(exc)) from None
        written.append(f"{LOCALTIME} -> {payload['target']}")
    if payload["timezone_file"]:
        ctx.conn.write_file(TIMEZONE_FILE, f"{zone}\n".encode())
        written.append(TIMEZONE_FILE)
    msg = f"{change.summary} ({', '.join(written)})"
    return Result(changed=True, msg=msg, diffs=change.diffs, data={"diff": _diff(payload["before"], zone)})

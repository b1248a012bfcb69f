"""What the file modules share: modes, owners, host facts, and putting content in place.

Content goes through the connection's atomic write (temp file in the same directory,
fsync, rename); ownership and mode changes go through the `file_set` probe. An owner or
group the host does not know is shown in the plan (an earlier task may create it) and
resolved again before apply touches anything, so an unknown user changes nothing.
"""

from __future__ import annotations

import secrets
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.module_api import (
    Change,
    Diff,
    ProbeError,
    TaskContext,
    TaskFailed,
    Writes,
    content_digest,
    controller_files,
)
from modules.files.probes import file_mode

ATTR_PROPERTIES: dict[str, Any] = {
    "mode": {
        "type": ["string", "integer"],
        "description": "Permissions as an octal string ('0644') or a symbolic mode as chmod reads "
        "it ('u+x,g-w', 'u=rwx,go=rx', 'a+X'), applied to the path's current mode (a new file "
        "starts from 0666, a new directory from 0777, less the umask); a YAML number such as "
        "0644 is taken as the octal value it spells, as in Ansible.",
    },
    "owner": {"type": "string", "description": "User (name or uid) that should own the path."},
    "group": {"type": "string", "description": "Group (name or gid) that should own the path."},
}

CONTENT_PROPERTIES: dict[str, Any] = {
    **ATTR_PROPERTIES,
    "backup": {
        "type": "boolean",
        "default": False,
        "description": "Keep the previous version beside the file as PATH.TIMESTAMP.bak.",
    },
    "follow": {
        "type": "boolean",
        "default": False,
        "description": "A symlink at the destination is followed and the file it points to is "
        "written (the link is judged like every link on the way: another user's link leads only "
        "to that user's own files). false: a link there fails the task, it is never written "
        "through nor read.",
    },
    "validate": {
        "type": "string",
        "pattern": "%s",
        "description": "A command run on the new content before it replaces the file; %s is "
        "the path of a temporary copy. A non-zero exit fails the task and leaves the file as it was.",
    },
}


def target_path(args: Mapping[str, Any], main: str) -> str:
    """The path argument under its own name or one of Ansible's aliases (path, dest, name)."""
    for key in (main, "path", "dest", "name"):
        if args.get(key):
            return str(args[key])
    raise TaskFailed(f"{main} is required")


def parse_mode(value: Any) -> int | str | None:
    """An octal mode as its number, a symbolic one as given (it depends on each path's mode)."""
    if value is None:
        return None
    try:
        number = file_mode.octal(value if isinstance(value, int) else str(value))
        if number is None:
            file_mode.check(str(value))
    except file_mode.ModeError as exc:
        raise TaskFailed(f"mode {value!r} must be in octal or symbolic form: {exc}") from None
    return str(value) if number is None else number


def host_facts(
    ctx: TaskContext,
    paths: Sequence[str],
    *,
    owner: str | None = None,
    group: str | None = None,
    checksum: str | None = None,
    follow: bool = False,
    follow_links: bool = False,
    tree: Mapping[str, Any] | None = None,
    listing: str | None = None,
) -> dict[str, Any]:
    """One round trip: facts about ``paths`` and the ids ``owner``/``group`` name;
    ``listing``: also the directories and files under that directory; ``follow_links``
    (a module's ``follow: true``): a path that is a symlink answers the facts of what it
    leads to, judged by the write rule, with ``via_link`` naming the link."""
    request: dict[str, Any] = {"paths": list(paths), "owner": owner, "group": group, "follow": follow}
    if follow_links:
        request["follow_links"] = True
    if listing:
        request["list"] = listing
    if checksum:
        request["checksum"] = checksum
    if tree:
        request["tree"] = dict(tree)
    try:
        return ctx.conn.run_probe("file_facts", request)
    except ProbeError as exc:
        raise TaskFailed(str(exc)) from None


def require_owners(ctx: TaskContext, attrs: Attrs) -> None:
    """Fail before any change when the wanted owner or group is still not on the host."""
    if attrs.unresolved:
        missing = host_facts(ctx, [], owner=attrs.owner, group=attrs.group)["unresolved"]
        if missing:
            raise TaskFailed("; ".join(missing) + "; nothing was changed")


def run_ops(ctx: TaskContext, ops: Sequence[Mapping[str, Any]]) -> None:
    if not ops:
        return
    try:
        ctx.conn.run_probe("file_set", {"ops": [dict(op) for op in ops]})
    except ProbeError as exc:
        raise TaskFailed(str(exc)) from None


def refuse_unsafe_write(facts: Mapping[str, Any]) -> None:
    """Fail in the plan (check mode too) when the guarded write would refuse the path: a
    link on the way that another user made, a relative path, a NUL byte."""
    if facts.get("write_refusal"):
        raise TaskFailed(str(facts["write_refusal"]))


def refuse_foreign_hardlink(path: str, facts: Mapping[str, Any], attrs: Attrs) -> None:
    """The primitive's hard-link rule (fileio.hardlink_suspect) for the user a task acts
    for: an existing file with more than one link is not read into a file that ``owner``
    gets, nor handed to that owner, unless it already belongs to them (a hard link of a
    root file at /tmp/x would give the user a copy of it). Another owner's hard link in a
    directory is refused by the primitive itself."""
    if not facts.get("exists") or facts.get("type") not in ("file", "link") or int(facts.get("nlink") or 1) <= 1:
        return
    if attrs.owner is not None and facts.get("uid") != attrs.uid:
        raise TaskFailed(
            f"refusing {path}: it is a hard link ({facts['nlink']} links) to a file of uid {facts['uid']}, "
            f"and owner {attrs.owner} is asked; rigger does not hand another user's hard-linked file over "
            "(remove the link, or name the original)"
        )


def judge_removal(ctx: TaskContext, path: str) -> dict[str, Any]:
    """What removing ``path`` would remove, judged on the host by identity (path_judge,
    the same judgement ensure_absent uses); a protected object fails the task."""
    try:
        judged = ctx.conn.run_probe("path_judge", {"path": path})
    except ProbeError as exc:
        raise TaskFailed(f"cannot judge {path}: {str(exc).removeprefix('probe path_judge failed: ')}") from None
    if judged["refusal"]:
        raise TaskFailed(str(judged["refusal"]))
    return judged


def identity(facts: Mapping[str, Any]) -> list[int] | None:
    return [facts["dev"], facts["inode"]] if facts.get("exists") else None


@dataclass(frozen=True)
class Attrs:
    """The owner, group and mode a task asks for (None: leave as is).

    ``owner``/``group`` keep the names: a user an earlier task creates is not on the host
    while planning (check mode), so its uid is unknown until apply resolves it. A symbolic
    ``mode`` stays a string: the host applies it to each path's own mode; ``umask`` is the
    host's, for what a new path starts from.
    """

    uid: int | None
    gid: int | None
    mode: int | str | None
    owner: str | None = None
    group: str | None = None
    umask: int = 0o022

    @classmethod
    def wanted(cls, args: Mapping[str, Any], answer: Mapping[str, Any]) -> Attrs:
        mode = parse_mode(args.get("mode"))
        umask = answer["umask"] if isinstance(mode, str) else cls.umask
        return cls(answer.get("uid"), answer.get("gid"), mode, args.get("owner"), args.get("group"), umask)

    def mode_of(self, facts: Mapping[str, Any]) -> int | None:
        """The mode an existing path ends with (None: mode not asked)."""
        if self.mode is None:
            return None
        return file_mode.resulting(self.mode, int(facts["mode"], 8), facts["type"] == "directory", self.umask)

    def created_mode(self, directory: bool) -> int | None:
        """The mode a path this task creates ends with: Ansible creates it (0666 or 0777
        less the umask), then applies the mode."""
        if self.mode is None:
            return None
        start = (0o777 if directory else 0o666) & ~self.umask
        return file_mode.resulting(self.mode, start, directory, self.umask)

    @property
    def unresolved(self) -> bool:
        return (self.owner is not None and self.uid is None) or (self.group is not None and self.gid is None)

    def diffs(self, path: str, facts: Mapping[str, Any], with_mode: bool = True) -> list[Diff]:
        """What differs on an existing path (nothing for a path that does not exist)."""
        if not facts.get("exists"):
            return []
        found = []
        if self.owner is not None and facts["uid"] != self.uid:
            found.append(Diff(f"{path} (owner)", f"{facts['owner'] or facts['uid']}\n", f"{self.owner}\n"))
        if self.group is not None and facts["gid"] != self.gid:
            found.append(Diff(f"{path} (group)", f"{facts['group'] or facts['gid']}\n", f"{self.group}\n"))
        mode = self.mode_of(facts)
        # a link has no mode of its own (chmod would change its target): never a difference
        if with_mode and mode is not None and facts["type"] != "link" and int(facts["mode"], 8) != mode:
            found.append(Diff(f"{path} (mode)", f"{facts['mode']}\n", f"{mode:04o}\n"))
        return found

    def describe(self, directory: bool) -> str:
        """What is asked, as " owner=x group=y mode=0750" (shown for a path being created)."""
        parts = [f"owner={self.owner}" if self.owner else "", f"group={self.group}" if self.group else ""]
        mode = self.created_mode(directory)
        parts.append(f"mode={mode:04o}" if mode is not None else "")
        return "".join(f" {p}" for p in parts if p)

    def op(
        self, path: str, recurse: bool = False, with_mode: bool = True, mode: int | str | None = None
    ) -> dict[str, Any]:
        """The attrs op for ``path``; ``mode`` overrides the asked one (a file just written
        with its final mode)."""
        mode = (mode if mode is not None else self.mode) if with_mode else None
        return {
            "op": "attrs",
            "path": path,
            "uid": self.uid,
            "gid": self.gid,
            "owner": self.owner,
            "group": self.group,
            "mode": mode,
            "recurse": recurse,
        }


def as_text(data: bytes | None) -> str:
    if data is None:
        return ""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return f"<binary, {len(data)} bytes>\n"


def backup_path(path: str) -> str:
    return f"{path}.{time.strftime('%Y%m%dT%H%M%S')}.bak"


def controller_file(ctx: TaskContext, name: str, kind: str) -> Path:
    """A file named by a task, looked up as Ansible does: role, then playbook ``kind/``, then playbook dir."""
    if Path(name).is_absolute():
        return Path(name)
    roots = [Path(str(ctx.vars[key])) / kind for key in ("role_path",) if ctx.vars.get(key)]
    playbook_dir = Path(str(ctx.vars.get("playbook_dir", ".")))
    roots += [playbook_dir / kind, playbook_dir]
    for root in roots:
        if controller_files.exists(root / name):
            return root / name
    raise TaskFailed(f"could not find {name!r} in {', '.join(str(r) for r in roots)}")


@dataclass(frozen=True)
class Content:
    """What to put at ``dest``. ``source_mode``: the mode of the host file it is copied
    from (copy with remote_src), which the written file takes as Ansible's copystat gives
    it: when it replaces a file, and with ``for_new`` also when it creates one."""

    dest: str
    data: bytes
    source_mode: int | None = None
    for_new: bool = False


def _written_mode(attrs: Attrs, content: Content, previous: bytes | None) -> int | None:
    """The mode new content is written with (None: the file's own, or the default for a new one)."""
    if isinstance(attrs.mode, int):
        return attrs.mode
    start = content.source_mode if previous is not None or content.for_new else None
    if start is None:
        return attrs.created_mode(directory=False) if previous is None else None
    return start if attrs.mode is None else file_mode.resulting(attrs.mode, start, False, attrs.umask)


def plan_content(ctx: TaskContext, args: Mapping[str, Any], content: Content, verb: str) -> Change | None:
    """The change that puts the content at its dest with the asked owner/group/mode, or None."""
    dest, wanted = content.dest, content.data
    answer = host_facts(
        ctx, [dest], owner=args.get("owner"), group=args.get("group"), follow_links=bool(args.get("follow"))
    )
    facts = answer["paths"][dest]
    refuse_unsafe_write(facts)
    via = ""
    if facts.get("via_link"):  # follow: true, the link judged on the host: its target is the file
        dest, content = facts["path"], replace(content, dest=facts["path"])
        via = f" (through the link {facts['via_link']})"
    if facts.get("exists") and facts["type"] == "link":
        raise TaskFailed(
            f"{dest} is a symlink (-> {facts['link_target']}); rigger does not write through a link: "
            "set follow: true to write the file it points to, or name that file"
        )
    if facts.get("exists") and facts["type"] != "file":
        raise TaskFailed(f"{dest} exists and is not a regular file ({facts['type']})")
    attrs = Attrs.wanted(args, answer)
    refuse_foreign_hardlink(dest, facts, attrs)
    current = ctx.conn.read_file(dest) if facts["exists"] else None
    diffs = [] if current == wanted else [Diff(dest, as_text(current), as_text(wanted))]
    written = _written_mode(attrs, content, current) if current != wanted else None
    if facts.get("exists") and written is not None and content.source_mode is not None:
        diffs += attrs.diffs(dest, facts, with_mode=False)
        if int(facts["mode"], 8) != written:
            diffs.append(Diff(f"{dest} (mode)", f"{facts['mode']}\n", f"{written:04o}\n"))
    else:
        diffs += attrs.diffs(dest, facts)
    if not diffs:
        return None
    summary = (f"{verb} {dest}" if current != wanted else f"set attributes of {dest}") + via
    payload = {"dest": dest, "data": wanted, "previous": current, "attrs": attrs, "identity": identity(facts)}
    return Change(
        summary=summary,
        diffs=tuple(diffs),
        payload={**payload, "content": content},
        fingerprint={f"file:{dest}": content_digest(current)},
        effects=(Writes(dest, wanted, written),),
    )


def _validate(ctx: TaskContext, command: str, dest: str, data: bytes) -> None:
    parent, _, base = dest.rpartition("/")
    temp = f"{parent}/.{base}.rigger-validate-{secrets.token_hex(8)}"  # not guessable ahead
    ctx.conn.write_file(temp, data, mode=0o600)
    try:
        result = ctx.conn.run(shlex.split(command.replace("%s", shlex.quote(temp))), check=False)
    finally:
        run_ops(ctx, [{"op": "remove", "path": temp}])
    if result.rc != 0:
        raise TaskFailed(f"validation failed ({command}), {dest} left as it was:\n{result.tail()}".rstrip())


def apply_content(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> dict[str, Any]:
    """Validate, back up, write atomically, then set owner/group/mode. Returns result data."""
    payload = change.payload
    dest, data, previous, attrs = payload["dest"], payload["data"], payload["previous"], payload["attrs"]
    require_owners(ctx, attrs)
    backup = None
    # written content gets its final mode before it appears; a file that keeps its mode
    # through the write then gets the asked one (symbolic: applied to the kept one)
    mode = _written_mode(attrs, payload["content"], previous) if previous != data else None
    if previous != data:
        if args.get("validate"):
            _validate(ctx, args["validate"], dest, data)
        if previous is not None and args.get("backup"):
            backup = backup_path(dest)
            ctx.conn.write_file(backup, previous)
        ctx.conn.write_file(dest, data, mode=mode)
    if attrs.owner is not None or attrs.group is not None or attrs.mode is not None:
        run_ops(ctx, [attrs.op(dest, mode=mode)])
    return {"dest": dest, "backup_file": backup, "size": len(data), "changed": True}

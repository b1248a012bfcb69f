"""Read-only: the members of a tar or zip archive, each judged, and what extracting it into
``dest`` would change.

The archive is a file on the host (``path``, read through the file primitive, at most
``max_bytes``) or bytes sent by the controller (``data``, base64). Every member name is
judged before anything is extracted (``judge``): an absolute name, a ``..`` component, a
symlink whose target leaves dest (absolute, or climbing out), a member below a symlink
member, a hard link to anything but an earlier file member, and a device, FIFO or other
special file are each a refusal of the whole archive. On the host, every directory on the
way to a member (below dest) must be a directory, never a link: nothing is written
through a link, whoever made it. Answer: ``handler`` (Ansible's class name), ``files``
(the member names as written), ``refusal`` (why nothing may be extracted, or None),
``digest`` (sha256 of the archive) and ``changes`` (member name, action, mode, target).
"""

from __future__ import annotations

import base64
import hashlib
import io
import posixpath
import stat
import tarfile
import zipfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("fileio", "file_facts")
MAX_BYTES = 1 << 30
KEPT_BITS = 0o1777  # setuid and setgid are never restored (no archive owner is either)


class Refusal(Exception):
    """The archive may not be extracted; the message says why."""


def archive_bytes(args: dict[str, Any]) -> bytes:
    if args.get("data") is not None:
        return base64.b64decode(args["data"])
    data = call("fileio", {"op": "read", "path": args["path"], "max_bytes": int(args.get("max_bytes") or MAX_BYTES)})
    if not data["exists"]:
        raise Refusal(f"Source '{args['path']}' does not exist")
    return base64.b64decode(data["data"])


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.isdir():
        return "dir"
    if member.isreg():
        return "file"
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    if member.ischr() or member.isblk():
        return "device"
    return "FIFO" if member.isfifo() else "special file"


def _tar_members(data: bytes) -> tuple[str, list[dict[str, Any]], dict[str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
        handler = "TgzArchive" if data[:2] == b"\x1f\x8b" else "TarArchive"
        members, contents = [], {}
        for member in archive.getmembers():
            kind = _tar_kind(member)
            members.append({"raw": member.name, "kind": kind, "mode": member.mode, "link": member.linkname})
            if kind == "file":
                handle = archive.extractfile(member)
                contents[member.name] = handle.read() if handle else b""
        return handler, members, contents


def _zip_members(data: bytes) -> tuple[str, list[dict[str, Any]], dict[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members, contents = [], {}
        for info in archive.infolist():
            unix = info.external_attr >> 16
            body = archive.read(info) if not info.is_dir() else b""
            if info.is_dir():
                kind, mode, link = "dir", stat.S_IMODE(unix) or 0o755, ""
            elif stat.S_ISLNK(unix):
                kind, mode, link = "symlink", 0o777, body.decode("utf-8", "surrogateescape")
            elif unix and not stat.S_ISREG(unix):
                kind, mode, link = "special file", 0, ""
            else:
                kind, mode, link = "file", stat.S_IMODE(unix) or 0o644, ""
                contents[info.filename] = body
            members.append({"raw": info.filename, "kind": kind, "mode": mode, "link": link})
        return "ZipArchive", members, contents


def read_members(data: bytes) -> tuple[str, list[dict[str, Any]], dict[str, bytes]]:
    """(handler, members, file contents by raw name) of a tar (plain, gz, bz2, xz) or zip."""
    if zipfile.is_zipfile(io.BytesIO(data)):
        return _zip_members(data)
    try:
        return _tar_members(data)
    except tarfile.TarError as exc:
        raise Refusal(f"Failed to find handler for the archive: not a tar or zip file ({exc})") from None


def _normal(raw: str) -> str:
    """The member's path relative to dest ("" for dest itself)."""
    parts = [part for part in raw.split("/") if part not in ("", ".")]
    return "/".join(parts)


def judge(members: list[dict[str, Any]]) -> str | None:
    """Why these members may not be extracted anywhere, or None. Names only: no host."""
    links: set[str] = set()
    files: set[str] = set()
    for member in members:
        raw, kind = member["raw"], member["kind"]
        name = _normal(raw)
        if "\0" in raw or raw.startswith("/"):
            return f"refusing the archive: member {raw!r} is an absolute path"
        if ".." in name.split("/"):
            return f"refusing the archive: member {raw!r} climbs out of dest ('..')"
        if kind not in ("dir", "file", "symlink", "hardlink"):
            return f"refusing the archive: member {raw!r} is a {kind}; unarchive extracts files, directories and links"
        parents = name.split("/")[:-1]
        prefixes = ["/".join(parents[:i]) for i in range(1, len(parents) + 1)]
        through = next((prefix for prefix in prefixes if prefix in links), None)
        if through is not None:
            return f"refusing the archive: member {raw!r} lies below the symlink member {through!r}"
        below = next((prefix for prefix in prefixes if prefix in files), None)
        if below is not None:
            return f"refusing the archive: member {raw!r} lies below the file member {below!r}"
        if kind == "symlink":
            target = member["link"]
            inside = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
            if not target or target.startswith("/") or inside == ".." or inside.startswith("../"):
                return f"refusing the archive: symlink member {raw!r} -> {target!r} leads out of dest"
            links.add(name)
        if kind == "hardlink" and _normal(member["link"]) not in files:
            return f"refusing the archive: hard link member {raw!r} -> {member['link']!r} names no earlier file member"
        if kind == "file":
            files.add(name)
        if not name and kind != "dir":
            return f"refusing the archive: member {raw!r} names dest itself"
    return None


def _wanted_dirs(members: list[dict[str, Any]]) -> list[str]:
    """Every directory below dest a member needs, parents first."""
    found: dict[str, None] = {}
    for member in members:
        parts = _normal(member["raw"]).split("/")
        for end in range(1, len(parts)):
            found["/".join(parts[:end])] = None
    return list(found)


def _owner_differs(facts: dict[str, Any], owners: dict[str, Any]) -> bool:
    uid, gid = owners.get("uid"), owners.get("gid")
    return (uid is not None and facts.get("uid") != uid) or (gid is not None and facts.get("gid") != gid)


def _change(
    member: dict[str, Any], facts: dict[str, Any], digests: tuple[str | None, str | None], owners: dict[str, Any]
) -> str | None:
    """The action one member needs (None: dest already holds it); a Refusal when a
    directory stands where a non-directory member goes, or the reverse. ``owners``: the
    uid, gid and mode the task asks for every member (None: the archive's mode, no owner)."""
    kind, exists, found = member["kind"], facts.get("exists"), facts.get("type")
    mode = member_mode(member, owners)
    if kind == "dir":
        if exists and found != "directory":
            raise Refusal(
                f"refusing the archive: {facts['path']} is a {found}, and the archive holds a directory there"
            )
        if not exists:
            return "mkdir"
        return "attrs" if int(facts["mode"], 8) != mode or _owner_differs(facts, owners) else None
    if found == "directory":
        raise Refusal(f"refusing the archive: {facts['path']} is a directory, and the archive holds a {kind} there")
    if kind == "symlink":
        if found != "link" or facts.get("link_target") != member["link"]:
            return "symlink"
        return "attrs" if _owner_differs(facts, owners) else None
    expected = digests[1] if kind == "hardlink" else digests[0]
    if found != "file" or facts.get("checksum") != expected:
        return "write" if kind == "file" else "hardlink"
    if kind == "file" and (int(facts["mode"], 8) != mode or _owner_differs(facts, owners)):
        return "attrs"
    return None


def member_mode(member: dict[str, Any], owners: dict[str, Any]) -> int:
    """The task's mode for every member, or the archive's (setuid and setgid dropped)."""
    return int(owners["mode"]) if owners.get("mode") is not None else int(member["mode"]) & KEPT_BITS


def _under(dest: str, name: str) -> str:
    return f"{dest.rstrip('/')}/{name}" if name else dest


def _owners(args: dict[str, Any]) -> dict[str, Any]:
    """The uid and gid ``owner`` and ``group`` name on the host, and ``mode``; a name the
    host does not know refuses the archive before anything is written."""
    answer = call("file_facts", {"paths": [], "owner": args.get("owner"), "group": args.get("group")})
    if answer["unresolved"]:
        raise Refusal("; ".join(answer["unresolved"]) + "; nothing was extracted")
    return {"uid": answer["uid"], "gid": answer["gid"], "mode": args.get("mode")}


def _real_dest(dest: str) -> str:
    """dest, or the directory a link there leads to (Ansible's isdir follows it), by the
    file primitive's rule: another user's link only to that user's own files."""
    facts = call("file_facts", {"paths": [dest], "follow_links": True})["paths"][dest]
    if facts.get("write_refusal"):
        raise Refusal(str(facts["write_refusal"]))
    return str(facts["path"]) if facts.get("via_link") and facts.get("type") == "directory" else dest


def plan_members(
    dest: str, members: list[dict[str, Any]], contents: dict[str, bytes], owners: dict[str, Any]
) -> list[dict[str, Any]]:
    """What extracting ``members`` into ``dest`` changes, judged against the host."""
    dirs = _wanted_dirs(members)
    paths = [dest] + [_under(dest, d) for d in dirs] + [_under(dest, _normal(m["raw"])) for m in members]
    facts = call("file_facts", {"paths": list(dict.fromkeys(paths)), "checksum": "sha1"})["paths"]
    if not facts[dest].get("exists") or facts[dest]["type"] != "directory":
        raise Refusal(f"dest '{dest}' must be an existing dir")
    symlinks = {_normal(m["raw"]) for m in members if m["kind"] == "symlink"}
    for directory in dirs:
        found = facts[_under(dest, directory)]
        if found.get("exists") and found["type"] != "directory" and directory not in symlinks:
            raise Refusal(
                f"refusing the archive: {found['path']} is a {found['type']}, not a directory; unarchive writes "
                "nothing through a link or below a file (remove it, or extract elsewhere)"
            )
    digests = {_normal(raw): hashlib.sha1(body).hexdigest() for raw, body in contents.items()}
    changes = []
    for member in members:
        name = _normal(member["raw"])
        if not name:
            continue
        pair = (digests.get(name), digests.get(_normal(member["link"])))
        action = _change(member, facts[_under(dest, name)], pair, owners)
        if action:
            changes.append({"name": name, "raw": member["raw"], "action": action, "kind": member["kind"],
                            "mode": member_mode(member, owners), "link": member["link"]})  # fmt: skip
    return changes


def survey(args: dict[str, Any]) -> tuple[dict[str, Any], bytes, dict[str, bytes]]:
    """The answer, the archive's bytes and its file contents (for archive_extract)."""
    data = archive_bytes(args)
    handler, members, contents = read_members(data)
    answer: dict[str, Any] = {
        "handler": handler,
        "files": [m["raw"] for m in members],
        "digest": hashlib.sha256(data).hexdigest(),
        "refusal": judge(members),
        "changes": [],
    }
    if answer["refusal"] is None:
        answer["dest"] = _real_dest(args["dest"])
        answer["owners"] = _owners(args)
        answer["changes"] = plan_members(answer["dest"], members, contents, answer["owners"])
    return answer, data, contents


def main(args: dict[str, Any]) -> dict[str, Any]:
    """``with_contents`` (archive_extract's in-process call only): the file contents by
    member name too, so the bytes judged are the bytes written."""
    try:
        answer, _, contents = survey(args)
    except Refusal as exc:
        return {"handler": None, "files": [], "digest": None, "refusal": str(exc), "changes": []}
    if args.get("with_contents"):
        answer["contents"] = {_normal(raw): body for raw, body in contents.items()}
    return answer

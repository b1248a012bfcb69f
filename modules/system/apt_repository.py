"""Add or remove a one-line APT repository (`deb [signed-by=KEYRING] URL SUITE COMPONENTS`).

Ansible's `apt_repository`, as it edits the files: /etc/apt/sources.list and every
/etc/apt/sources.list.d/*.list are read; a line is a source when its first word is `deb`
or `deb-src` (blanks collapsed, a `# comment` after it kept). `present`: when the source
is in any file it is enabled there (a `# deb ...` line uncommented), else it is appended
to sources.list.d/FILENAME.list, FILENAME being `filename` or, as Ansible suggests it,
the URL without its scheme, options and credentials, every run of other characters than
letters and digits made `_` (the NVIDIA CUDA repository's line goes to
`developer_download_nvidia_com_compute_cuda_repos_ubuntu2404_x86_64.list`). `absent`:
every enabled line of the source is removed, and a file left with no line is removed. A
changed file is rewritten in Ansible's form (`# ` before a disabled line, one blank
between words), atomically through the file primitive; a new file gets `mode` (0644).
The key a `signed-by=` option names is a keyring file put there first (get_url or copy:
the deb822 way; `apt_key` is refused). With `update_cache` (the default) `apt-get
update` runs after a change, through the apt module's code; when it fails the files are
put back as they were and the task fails, as Ansible does. Check mode reads only.
`ppa:` repositories (they need Launchpad) and `codename` are refused by name;
`install_python_apt` and `validate_certs` are accepted and change nothing (rigger needs
no python-apt; the certificates are the PPA key download's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.module_api import (
    Change,
    Diff,
    ProbeError,
    Result,
    TaskContext,
    TaskFailed,
    Unchanged,
    content_digest,
)
from modules.system.apt import update_cache

SOURCES = "/etc/apt/sources.list"
SOURCES_D = "/etc/apt/sources.list.d"
SOURCE_TYPES = ("deb", "deb-src")
_MODE = re.compile(r"^0?[0-7]{3,4}\Z")

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["repo"],
    "properties": {
        "repo": {
            "type": "string",
            "description": "The sources.list line (`deb [signed-by=...] URL SUITE COMPONENT...`).",
        },
        "state": {
            "type": "string",
            "enum": ["present", "absent"],
            "default": "present",
            "description": "present: the line is in a file and enabled; absent: no enabled line of it remains.",
        },
        "filename": {
            "type": "string",
            "pattern": "^[^/]+$",
            "description": "The file in sources.list.d, without `.list` (else one named after the URL).",
        },
        "mode": {
            "type": ["string", "integer"],
            "default": "0644",
            "description": "Permission bits of a file this task creates.",
        },
        "update_cache": {"type": "boolean", "default": True, "description": "Run apt-get update after a change."},
        "update-cache": {"type": "boolean", "description": "Another name for update_cache (Ansible's alias)."},
        "install_python_apt": {
            "type": "boolean",
            "default": True,
            "description": "Accepted; rigger needs no python-apt.",
        },
        "validate_certs": {
            "type": "boolean",
            "default": True,
            "description": "Accepted; used by Ansible for PPA keys only.",
        },
    },
}


@dataclass(frozen=True)
class Line:
    """One line of a sources file as Ansible's SourcesList parses it."""

    valid: bool
    enabled: bool
    source: str
    comment: str

    def dump(self) -> str:
        return f"{'' if self.enabled else '# '}{self.source}{' # ' + self.comment if self.comment else ''}\n"


def parse(text: str) -> Line:
    """Ansible's SourcesList._parse."""
    line, enabled, comment = text.strip(), True, ""
    if line.startswith("#"):
        enabled, line = False, line[1:]
    i = line.find("#")
    if i > 0:
        comment, line = line[i + 1 :].strip(), line[:i]
    source = line.strip()
    chunks = source.split()
    if chunks and chunks[0] in SOURCE_TYPES:
        return Line(True, enabled, " ".join(chunks), comment)
    return Line(False, enabled, source, comment)


def suggest_filename(source: str, filename: str | None) -> str:
    """Ansible's _suggest_filename: the URL's host and path, options and scheme dropped."""
    if filename:
        return f"{filename}.list"
    line = re.sub(r"\[[^\]]+\]", "", source)
    line = re.sub(r"\w+://", "", line)
    parts = [part for part in line.split() if part not in SOURCE_TYPES]
    first = parts[0] if parts else ""
    if "@" in first:
        first = first.split("@", 1)[1]  # credentials never name a file
    return "_".join(re.sub("[^a-zA-Z0-9]", " ", first).split()) + ".list"


def _read(ctx: TaskContext) -> dict[str, bytes | None]:
    """Every sources file Ansible reads: sources.list, then sources.list.d/*.list."""
    try:
        listing = ctx.conn.run_probe("file_facts", {"paths": [SOURCES_D], "list": SOURCES_D})["listing"]
    except ProbeError as exc:
        raise TaskFailed(f"cannot list {SOURCES_D}: {exc}") from None
    names = sorted(rel for rel, _ in listing["files"] if "/" not in rel and rel.endswith(".list"))
    files = {SOURCES: ctx.conn.read_file(SOURCES)}
    files.update({f"{SOURCES_D}/{name}": ctx.conn.read_file(f"{SOURCES_D}/{name}") for name in names})
    return files


def _lines(data: bytes | None) -> list[Line]:
    return [parse(line) for line in (data or b"").decode("utf-8", "replace").splitlines()]


def edited(files: Mapping[str, bytes | None], source: str, present: bool, target: str) -> dict[str, list[Line]]:
    """Each file's lines after the change (Ansible's _add_valid_source / _remove_valid_source)."""
    parsed = {path: _lines(data) for path, data in files.items() if data is not None}
    found = False
    for path, lines in parsed.items():
        if present:
            for n, line in enumerate(lines):
                if line.valid and line.source == source:
                    lines[n], found = Line(True, True, line.source, line.comment), True
        else:
            parsed[path] = [line for line in lines if not (line.valid and line.enabled and line.source == source)]
    if present and not found:
        parsed.setdefault(target, []).append(Line(True, True, source, ""))
    return parsed


def _mode(value: Any) -> int:
    text = f"{value:o}" if isinstance(value, int) else str(value)
    if not _MODE.match(text):
        raise TaskFailed(f"mode: {value!r} is not an octal mode")
    return int(text, 8)


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    repo = args["repo"]
    if repo.startswith("ppa:"):
        raise TaskFailed(
            f"{repo}: ppa repositories are not supported by rigger (they need Launchpad); write the deb line"
        )
    if any(char in repo for char in "\r\n\0"):
        raise TaskFailed(f"Invalid repository string: {repo!r} spans lines (one source line is one repository)")
    line = parse(repo)
    if not line.valid or not line.enabled:
        raise TaskFailed(f"Invalid repository string: {repo}")
    _mode(args["mode"])
    present = args["state"] == "present"
    files = _read(ctx)
    target = f"{SOURCES_D}/{suggest_filename(line.source, args.get('filename'))}"
    after = edited(files, line.source, present, target)
    before = {path: "".join(item.dump() for item in _lines(data)) for path, data in files.items() if data is not None}
    dumped = {path: "".join(item.dump() for item in lines) for path, lines in after.items()}
    changed = sorted(path for path in dumped.keys() | before.keys() if dumped.get(path) != before.get(path))
    data = {"repo": repo, "state": args["state"]}
    if not changed:
        return Unchanged(f"{line.source} is {args['state']}", {**data, "sources_added": [], "sources_removed": []})
    writes = {path: dumped[path] if dumped[path] else None for path in changed}
    diffs = tuple(Diff(path, before.get(path, ""), dumped[path]) for path in changed)
    verb = "add" if present else "remove"
    payload = {"writes": writes, "new": [p for p in changed if files.get(p) is None], **data}
    fingerprint = {f"file:{path}": content_digest(files.get(path)) for path in changed}
    return Change(f"{verb} {line.source} in {', '.join(changed)}", diffs, payload, fingerprint)


def _put(ctx: TaskContext, path: str, content: str | None, mode: int | None) -> None:
    """Write a sources file (None: remove it, by identity through the delete primitive)."""
    if content is not None:
        ctx.conn.write_file(path, content.encode(), mode=mode)
        return
    facts = ctx.conn.run_probe("file_facts", {"paths": [path]})["paths"][path]
    if facts.get("exists"):
        ctx.conn.run_probe(
            "file_set", {"ops": [{"op": "remove", "path": path, "identity": [facts["dev"], facts["inode"]]}]}
        )


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    writes, new = change.payload["writes"], change.payload["new"]
    previous = {path: ctx.conn.read_file(path) for path in writes}
    mode = _mode(args["mode"])
    for path, content in writes.items():
        _put(ctx, path, content, mode if path in new else None)
    data = {
        "repo": args["repo"],
        "state": args["state"],
        "sources_added": [p for p in writes if previous[p] is None],
        "sources_removed": [p for p in writes if writes[p] is None],
    }
    if args.get("update-cache", args["update_cache"]):
        try:
            update_cache(ctx)
        except TaskFailed as exc:
            for path, content in previous.items():  # Ansible's revert_sources_list
                _put(ctx, path, None if content is None else content.decode("utf-8", "replace"), None)
            raise TaskFailed(f"Failed to update apt cache: {exc.msg}", data) from None
    return Result(True, change.summary, diffs=change.diffs, data=data)

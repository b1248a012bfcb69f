"""Clone a git repository onto the host and check out a pinned version (a commit, a tag or a branch).

Ansible's `git`, with the host's own git: a missing `dest` is cloned (`git clone
--origin REMOTE`, with `--branch` for a tag or a branch, `--depth` when given), then a
commit `version` is checked out. An existing clone is compared first, as Ansible's check
mode compares it: `before` is its HEAD, `after` the commit `version` names (a full
40-hex commit as written, a tag or a branch as `git ls-remote` reports it, peeled), and
the remote's URL; when they differ the remote is fetched (tags too) and the commit
checked out (a branch as that local branch reset to it, a tag or commit detached, as
Ansible leaves them; `HEAD` detached at the remote's HEAD, where Ansible keeps the local
branch). Tracked files modified in `dest` fail the task unless `force` (then they are
reset, as `git reset --hard` does); untracked files are left. `update: false` leaves an
existing clone alone; `clone: false` does not clone a missing one. `repo` and `version`
are operands, never options: a value starting with `-` is refused before git runs, and
git's `ext::` transport (a command as a URL) is refused (`protocol.ext.allow=never`).
`dest` is judged by the file primitive's walk (a link another user made on the way is
refused) before git runs. Submodules are not cloned: with
`recursive` (Ansible's default, which clones them) a checkout that has a `.gitmodules`
warns. A short commit id is refused (give the full one); `depth`
with a commit `version` is refused (a shallow clone may lack it). Returns `before`,
`after`, `remote_url_changed`. Arguments rigger does not act on (`bare`, `refspec`,
`key_file`, `accept_hostkey`, `single_branch`, `archive`, ...) are refused by name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from engine.module_api import (
    Change,
    CommandResult,
    Diff,
    Fills,
    Result,
    TaskContext,
    TaskFailed,
    Unchanged,
    command_line,
    operand,
)

HOST_PATHS = ("dest",)
_COMMIT = re.compile(r"^[0-9a-f]{40}\Z")
_HEX = re.compile(r"^[0-9a-f]{4,39}\Z")
_REMOTE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")
GIT = ("git", "-c", "protocol.ext.allow=never")

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["dest"],
    "anyOf": [{"required": ["repo"]}, {"required": ["name"]}],
    "properties": {
        "repo": {"type": "string", "description": "The repository's URL or path (git, SSH, HTTP(S) or file)."},
        "name": {"type": "string", "description": "Another name for repo (Ansible's alias)."},
        "dest": {"type": "string", "description": "The directory on the host to clone into."},
        "version": {
            "type": "string",
            "default": "HEAD",
            "description": "What to check out: a full commit id, a tag, a branch, or HEAD (the remote's default).",
        },
        "force": {
            "type": "boolean",
            "default": False,
            "description": "Discard modifications of tracked files in dest (else they fail the task).",
        },
        "depth": {"type": "integer", "minimum": 1, "description": "A shallow clone of this many commits."},
        "clone": {"type": "boolean", "default": True, "description": "Clone when dest holds no repository."},
        "update": {
            "type": "boolean",
            "default": True,
            "description": "Fetch and check out version in an existing clone.",
        },
        "remote": {"type": "string", "default": "origin", "description": "The name of the remote."},
        "recursive": {
            "type": "boolean",
            "default": True,
            "description": "Ansible's default clones submodules; rigger does not, and warns when the checkout has any.",
        },
    },
}


def _git(ctx: TaskContext, dest: str, *words: str, read_only: bool = True) -> CommandResult:
    return ctx.conn.run([*GIT, "-C", dest, *words], read_only=read_only, check=False)


def _checked(args: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """repo, dest, version and remote, each refused when it would read as an option."""
    repo = operand(args["repo"], "repo")
    if repo.startswith("ext::"):
        raise TaskFailed(f"repo: {repo!r} uses git's ext transport (a command run as a URL); rigger refuses it")
    dest = operand(args["dest"], "dest")
    if not dest.startswith("/"):
        raise TaskFailed(f"dest: {dest!r} is not an absolute path")
    version = operand(args["version"], "version")
    if _HEX.match(version) and not _COMMIT.match(version):
        raise TaskFailed(f"version: {version!r} looks like a short commit id; give the full 40-hex commit")
    if args.get("depth") and _COMMIT.match(version):
        raise TaskFailed("depth with a commit version is not supported by rigger (a shallow clone may lack it)")
    return repo, dest, version, operand(args["remote"], "remote", _REMOTE)


def _resolve(ctx: TaskContext, repo: str, version: str) -> tuple[str, str]:
    """(commit, kind) version names in repo: kind is commit, branch, tag or HEAD."""
    if _COMMIT.match(version):
        return version, "commit"
    patterns = [repo, version, f"{version}^{{}}"]  # the peeled line: an annotated tag's commit
    done = ctx.conn.run([*GIT, *command_line(["ls-remote"], patterns)], read_only=True, check=False)
    if done.rc != 0:
        raise TaskFailed(f"cannot read {repo} (git ls-remote exited {done.rc}):\n{done.tail()}".rstrip())
    refs: dict[str, str] = {}
    for line in done.stdout.splitlines():
        commit, _, ref = line.partition("\t")
        refs[ref] = commit
    for ref, kind in ((f"refs/tags/{version}^{{}}", "tag"), (f"refs/tags/{version}", "tag"),
                      (f"refs/heads/{version}", "branch"), ("HEAD" if version == "HEAD" else "", "HEAD")):  # fmt: skip
        if ref in refs:
            return refs[ref], kind
    raise TaskFailed(f"Failed to find version {version!r} in {repo} (not a branch, a tag or HEAD there)")


def _current(ctx: TaskContext, dest: str, remote: str) -> tuple[str | None, str | None, bool]:
    """The clone's HEAD commit, its remote's URL, and whether tracked files are modified."""
    head = _git(ctx, dest, "rev-parse", "--verify", "--quiet", "HEAD")
    url = _git(ctx, dest, "config", "--get", f"remote.{remote}.url")
    status = _git(ctx, dest, "status", "--porcelain", "--untracked-files=no")
    if status.rc != 0:
        raise TaskFailed(f"{dest} is not a usable git clone:\n{status.tail()}".rstrip())
    return head.stdout.strip() or None, url.stdout.strip() or None, bool(status.stdout.strip())


def _dest(ctx: TaskContext, dest: str) -> bool:
    """Whether dest holds a clone; a write there the file primitive would refuse fails."""
    info = ctx.conn.run_probe("path_info", {"paths": [dest, f"{dest.rstrip('/')}/.git"]})["paths"]
    if info[dest].get("write_refusal"):
        raise TaskFailed(str(info[dest]["write_refusal"]))
    return bool(info[f"{dest.rstrip('/')}/.git"]["exists"])


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    repo, dest, version, remote = _checked({**args, "repo": args.get("repo") or args.get("name")})
    if not _dest(ctx, dest):
        if not args["clone"]:
            return Unchanged(f"{dest} holds no clone and clone is false", {"before": None, "after": None})
        after, kind = _resolve(ctx, repo, version)
        cloned = {"action": "clone", "after": after, "kind": kind, "repo": repo}
        diff = Diff(f"{dest} (git HEAD)", "", f"{after}\n")
        summary = f"clone {repo} at {version} into {dest}"
        return Change(summary, (diff,), cloned, {f"git:{dest}": "absent"}, (Fills(dest, f"a clone of {repo}"),))
    before, url, modified = _current(ctx, dest, remote)
    if modified and not args["force"]:
        raise TaskFailed(f"Local modifications exist in the destination: {dest} (force=no).", {"before": before})
    if not args["update"]:
        return Unchanged(f"{dest} is a clone; update is false", {"before": before, "after": before})
    after, kind = _resolve(ctx, repo, version)
    if before == after and url == repo and not modified:
        data = {"before": before, "after": after, "remote_url_changed": False}
        return Unchanged(f"{dest} is at {version} ({after})", data)
    diffs = [Diff(f"{dest} (git HEAD)", f"{before}\n", f"{after}\n")] if before != after else []
    if url != repo:
        diffs.append(Diff(f"{dest} (remote {remote} url)", f"{url}\n", f"{repo}\n"))
    if modified:
        diffs.append(Diff(f"{dest} (modified tracked files)", "modified\n", "reset\n"))
    payload: dict[str, Any] = {
        "action": "update",
        "after": after,
        "kind": kind,
        "repo": repo,
        "set_url": url != repo,
        "reset": modified,
    }
    fingerprint = {f"git:{dest}": f"{before}{' modified' if modified else ''}"}
    return Change(f"check out {version} ({after[:12]}) in {dest}", tuple(diffs), payload, fingerprint)


def _run(ctx: TaskContext, argv: list[str]) -> None:
    done = ctx.conn.run(argv, check=False)
    if done.rc != 0:
        raise TaskFailed(f"{' '.join(argv[3:5])} failed (rc {done.rc}):\n{done.tail()}".rstrip())


def _clone(ctx: TaskContext, args: Mapping[str, Any], dest: str, remote: str, payload: Mapping[str, Any]) -> None:
    version, kind = args["version"], payload["kind"]
    options = ["clone", "--origin", remote]
    options += ["--depth", str(int(args["depth"]))] if args.get("depth") else []
    options += ["--branch", version] if kind in ("tag", "branch") else []
    _run(ctx, [*GIT, *command_line(options, [payload["repo"], dest])])
    if kind == "commit":
        _run(ctx, [*GIT, "-C", dest, "checkout", "--force", "--detach", payload["after"]])


def _update(ctx: TaskContext, args: Mapping[str, Any], dest: str, remote: str, payload: Mapping[str, Any]) -> None:
    if payload["set_url"]:
        _run(ctx, [*GIT, "-C", dest, *command_line(["remote", "set-url"], [remote, payload["repo"]])])
    depth = ["--depth", str(int(args["depth"]))] if args.get("depth") else []
    _run(ctx, [*GIT, "-C", dest, *command_line(["fetch", "--tags", "--force", *depth], [remote])])
    if payload["reset"]:
        _run(ctx, [*GIT, "-C", dest, "reset", "--hard", "--quiet"])
    if payload["kind"] == "branch":
        _run(ctx, [*GIT, "-C", dest, "checkout", "--force", "-B", args["version"], payload["after"]])
    else:
        _run(ctx, [*GIT, "-C", dest, "checkout", "--force", "--detach", payload["after"]])


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    _, dest, _, remote = _checked({**args, "repo": change.payload["repo"]})
    before = None
    if change.payload["action"] == "clone":
        _clone(ctx, args, dest, remote, change.payload)
    else:
        before = _current(ctx, dest, remote)[0]
        _update(ctx, args, dest, remote, change.payload)
    after = _git(ctx, dest, "rev-parse", "HEAD", read_only=False).stdout.strip()
    data = {"before": before, "after": after, "remote_url_changed": bool(change.payload.get("set_url"))}
    if after != change.payload["after"]:
        raise TaskFailed(f"{dest} is at {after} after the checkout, not at {change.payload['after']}", data)
    return Result(True, change.summary, diffs=change.diffs, data=data, warnings=_submodule_warning(ctx, args, dest))


def _submodule_warning(ctx: TaskContext, args: Mapping[str, Any], dest: str) -> tuple[str, ...]:
    modules = f"{dest.rstrip('/')}/.gitmodules"
    if not args["recursive"] or not ctx.conn.run_probe("path_info", {"paths": [modules]})["paths"][modules]["exists"]:
        return ()
    return (f"{dest} has submodules (.gitmodules), which rigger does not clone (Ansible's recursive does); "
            "set recursive: false to say so, or clone them with a command task",)  # fmt: skip

"""Install, upgrade or remove Python packages with pip, in a virtualenv it creates when missing.

Ansible's `pip`: `name` takes version specifiers (`six==1.16.0`, `requests>=2`), or give a
`requirements` file on the host. Plan reads the venv's installed distributions from their
metadata and asks pip itself what it would do (`pip install --dry-run --report`), so the
diff lists every distribution that would change, with versions; nothing is installed in
check mode. `index_url`/`find_links`/`no_index` serve offline wheelhouses. `state: absent`
with a `requirements` file uninstalls the distributions the file names (nested `-r` files
followed), those installed only. The change's fingerprint holds the named distributions'
installed versions and the requirements file's digest: a saved plan is refused once one moved.
Requirements go after `--`; one that starts with `-` (`--index-url=URL`, `-r/etc/shadow`) is
refused, as is a `requirements` or `virtualenv` path that does: options are given only by
their own arguments (`index_url`, `find_links`, ... and `extra_args`, which is options).
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from engine.module_api import (
    PIP_REQUIREMENT,
    Change,
    Diff,
    Fills,
    Result,
    TaskContext,
    TaskFailed,
    Unchanged,
    command_line,
    content_digest,
    operand,
    operands,
)

PIP_ENV = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}

SOURCE_PROPERTIES: dict[str, Any] = {
    "index_url": {"type": "string", "description": "Base URL of the package index (pip --index-url)."},
    "extra_index_url": {"type": "string", "description": "Another index to search (pip --extra-index-url)."},
    "find_links": {
        "type": ["string", "array"],
        "items": {"type": "string"},
        "description": "Directories or URLs holding wheels (pip --find-links), e.g. an offline wheelhouse.",
    },
    "no_index": {"type": "boolean", "default": False, "description": "Do not use any index (only find_links)."},
}

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {
            "type": ["string", "array"],
            "items": {"type": "string"},
            "description": "Requirement(s) with optional specifiers: `six==1.16.0`, `torch>=2.4`.",
        },
        "requirements": {"type": "string", "description": "Path of a requirements file on the host."},
        "virtualenv": {"type": "string", "description": "The virtualenv to install into; created when missing."},
        "virtualenv_command": {
            "type": "string",
            "default": "python3 -m venv",
            "description": "Command that creates the virtualenv (the path is appended).",
        },
        "executable": {
            "type": "string",
            "description": "The pip to run when no virtualenv is given (default: python3 -m pip).",
        },
        "state": {
            "type": "string",
            "enum": ["present", "absent", "latest"],
            "default": "present",
            "description": "present: the specifiers are satisfied; latest: upgraded to the newest "
            "allowed; absent: not installed.",
        },
        **SOURCE_PROPERTIES,
        "extra_args": {"type": "string", "description": "More pip arguments, split like a shell would."},
    },
    "anyOf": [{"required": ["name"]}, {"required": ["requirements"]}],
}

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(args: Mapping[str, Any]) -> list[str]:
    names = args.get("name") or []
    listed = [n.strip() for n in names.split(",")] if isinstance(names, str) else [str(n) for n in names]
    return operands(listed, "name", PIP_REQUIREMENT)


def _pip(args: Mapping[str, Any]) -> list[str]:
    if args.get("virtualenv"):
        return [f"{args['virtualenv']}/bin/python", "-m", "pip"]
    return shlex.split(args["executable"]) if args.get("executable") else ["python3", "-m", "pip"]


def source_options(args: Mapping[str, Any]) -> list[str]:
    options = []
    if args.get("index_url"):
        options += ["--index-url", args["index_url"]]
    if args.get("extra_index_url"):
        options += ["--extra-index-url", args["extra_index_url"]]
    links = args.get("find_links") or []
    for link in [links] if isinstance(links, str) else links:
        options += ["--find-links", link]
    if args.get("no_index"):
        options.append("--no-index")
    return options + shlex.split(args.get("extra_args") or "")


def _install_argv(args: Mapping[str, Any], *options: str) -> list[str]:
    """``install``, options (rigger's, then ``options``), ``--``, the checked requirements."""
    head = ["install", *(["--upgrade"] if args["state"] == "latest" else []), *source_options(args), *options]
    if args.get("requirements"):
        head += ["-r", operand(args["requirements"], "requirements")]
    return command_line(head, _requirements(args))


def installed(ctx: TaskContext, venv: str) -> dict[str, Any]:
    return ctx.conn.run_probe("venv_dists", {"venv": venv})


def _would_install(ctx: TaskContext, args: Mapping[str, Any]) -> list[tuple[str, str]]:
    argv = [*_pip(args), *_install_argv(args, "--dry-run", "--quiet", "--no-cache-dir", "--report", "-")]
    result = ctx.conn.run(argv, check=False, read_only=True, env=PIP_ENV)
    if result.rc != 0:
        asked = " ".join(_requirements(args)) or f"-r {args['requirements']}"
        raise TaskFailed(f"pip cannot resolve {asked}:\n{result.tail()}".rstrip())
    report = json.loads(result.stdout[result.stdout.index("{") :])
    return [(item["metadata"]["name"], item["metadata"]["version"]) for item in report.get("install", [])]


def _diff(changes: Sequence[tuple[str, str | None, str | None]]) -> Diff:
    before = "".join(f"{name} {old or '(not installed)'}\n" for name, old, _ in changes)
    after = "".join(f"{name} {new or '(removed)'}\n" for name, _, new in changes)
    return Diff("python packages", before, after)


def _file_requirements(ctx: TaskContext, path: str, depth: int = 0) -> list[str]:
    """The requirement lines of a requirements file on the host, nested ``-r`` files followed
    (relative to the file, as pip reads them); other options and comments skipped."""
    data = ctx.conn.read_file(path)
    if data is None:
        raise TaskFailed(f"requirements file {path} does not exist on the host")
    found: list[str] = []
    for raw in data.decode("utf-8", "replace").splitlines():
        line = raw.split(" #", 1)[0].strip()
        nested = re.match(r"^(?:-r|--requirement)[ =]\s*(\S+)\Z", line)
        if nested and depth < 5:
            found += _file_requirements(ctx, posixpath.join(posixpath.dirname(path), nested.group(1)), depth + 1)
        elif line and not line.startswith(("#", "-")):
            found.append(line)
    return found


def _named(ctx: TaskContext, args: Mapping[str, Any]) -> list[str]:
    """The distribution names the task names, its requirements file's included."""
    asked = _requirements(args) + (_file_requirements(ctx, args["requirements"]) if args.get("requirements") else [])
    return list(dict.fromkeys(m.group(1) for m in map(_NAME.match, asked) if m))


def _fingerprint(
    ctx: TaskContext, args: Mapping[str, Any], names: list[str], dists: Mapping[str, str] | None
) -> dict[str, str]:
    """What the plan read: the named distributions' versions in the venv, the requirements
    file's content. A saved plan is refused once one of them moved."""
    prints = {f"pip:{normalized(n)}": dists.get(normalized(n)) or "absent" for n in names} if dists is not None else {}
    if args.get("requirements"):
        prints[f"file:{args['requirements']}"] = content_digest(ctx.conn.read_file(args["requirements"]))
    return prints


def _plan_absent(ctx: TaskContext, args: Mapping[str, Any], dists: Mapping[str, str] | None) -> Change | Unchanged:
    names = _named(ctx, args)
    have = dists if dists is not None else {}
    gone = [(n, have.get(normalized(n)), None) for n in names if have.get(normalized(n))]
    if not gone:
        return Unchanged("not installed: " + ", ".join(names), {"virtualenv": args.get("virtualenv")})
    return Change(
        f"uninstall {' '.join(n for n, _, _ in gone)}",
        (_diff(gone),),
        {"create": False, "remove": [n for n, _, _ in gone]},
        _fingerprint(ctx, args, names, dists),
    )


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    venv = args.get("virtualenv")
    found = installed(ctx, venv) if venv else None
    dists = found["dists"] if found else None
    create = found is not None and not found["exists"]
    if args["state"] == "absent":
        return _plan_absent(ctx, args, dists)
    if create:
        asked = _requirements(args) + ([f"-r {args['requirements']}"] if args.get("requirements") else [])
        diffs = (
            Diff(f"virtualenv {venv}", "absent\n", "created\n"),
            Diff("python packages", "", "\n".join(asked) + "\n"),
        )
        prints = {f"virtualenv:{venv}": "absent"}
        payload = {"create": True, "remove": []}
        return Change(f"create {venv} and install {' '.join(asked)}", diffs, payload, prints, _fills(venv))
    changes = [(name, (dists or {}).get(normalized(name)), version) for name, version in _would_install(ctx, args)]
    if not changes:
        return Unchanged("requirements satisfied", {"virtualenv": venv, "packages": dists or {}})
    summary = "install " + " ".join(f"{name}=={new}" for name, _, new in changes)
    prints = _fingerprint(ctx, args, _named(ctx, args), dists)
    return Change(summary, (_diff(changes),), {"create": False, "remove": []}, prints, _fills(venv))


def _fills(venv: str | None) -> tuple[Fills, ...]:
    """What pip installs is known after apply: a later read under the venv says so."""
    return (Fills(venv, "python packages"),) if venv else ()


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    venv = args.get("virtualenv")
    if change.payload["create"]:
        ctx.progress(f"creating virtualenv {venv}")
        ctx.conn.run(command_line(shlex.split(args["virtualenv_command"]), [operand(venv, "virtualenv")]))
    pip = _pip(args)
    if change.payload["remove"]:
        argv = command_line([*pip, "uninstall", "-y"], change.payload["remove"])
    else:
        argv = [*pip, *_install_argv(args)]
    ctx.progress(change.summary)  # not argv: an index URL may carry a token
    result = ctx.conn.run(argv, check=False, env=PIP_ENV)
    if result.rc != 0:
        raise TaskFailed(f"pip failed (exit {result.rc}):\n{result.tail()}".rstrip(), {"stdout": result.stdout})
    packages = installed(ctx, venv)["dists"] if venv else {}
    data = {"virtualenv": venv, "packages": packages, "stdout": result.stdout}
    return Result(changed=True, msg=change.summary, diffs=change.diffs, data=data)

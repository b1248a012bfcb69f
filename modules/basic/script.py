"""Copy a script from the controller to the host and run it there; changed unless a guard says otherwise.

Ansible's `script`: free form, `script: files/setup.sh --fast` (or `cmd:`): the first
word is the script, looked up as `copy` looks up `src` (the role's `files/`, the
playbook's `files/`, the playbook directory); the other words are its arguments, split
like a shell splits them and passed to the script as written, never through a shell
(Ansible hands the line to the host's shell, so `$HOME` or a glob there would be
expanded; rigger passes them unexpanded). The script is written through the file
primitive, mode 0700, into a fresh private directory under the remote user's
`~/.ansible/tmp` (the become user's, with become), run there with `executable` as its
interpreter when given (else by its `#!` line), in `chdir` when given, and removed
afterwards, run or not. `creates` / `removes` skip it when that path exists / does not.
A script cannot predict its own effect, so check mode skips it (as Ansible's does).
Returns `rc`, `stdout`, `stdout_lines`, `stderr`, `stderr_lines`; a non-zero exit fails
the task. `decrypt` (vault) is refused by name.
"""

from __future__ import annotations

import hashlib
import secrets
import shlex
from collections.abc import Mapping
from typing import Any

from engine.module_api import (
    Change,
    ProbeError,
    Result,
    TaskContext,
    TaskFailed,
    Unchanged,
    content_digest,
    operand,
)
from modules.files.filework import controller_file

HOST_PATHS = ("chdir", "creates", "removes")
FREE_FORM = "cmd"
CHECK_MODE = "skip"

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["cmd"],
    "properties": {
        "cmd": {"type": "string", "description": "The script on the controller, then its arguments."},
        "chdir": {"type": "string", "description": "Directory on the host to run the script in."},
        "creates": {"type": "string", "description": "Skip the script when this path exists on the host."},
        "removes": {"type": "string", "description": "Skip the script when this path does not exist on the host."},
        "executable": {
            "type": "string",
            "description": "The interpreter to run the script with (`python3`, `/bin/bash`); else its `#!` line.",
        },
    },
}


def _words(args: Mapping[str, Any]) -> list[str]:
    try:
        words = shlex.split(args["cmd"])
    except ValueError as exc:
        raise TaskFailed(f"cannot split {args['cmd']!r}: {exc}") from None
    if not words:
        raise TaskFailed("script: no script named (cmd is empty)")
    return words


def _guard(ctx: TaskContext, args: Mapping[str, Any]) -> str | None:
    creates, removes = args.get("creates"), args.get("removes")
    paths = [p for p in (creates, removes) if p]
    if not paths:
        return None
    info = ctx.conn.run_probe("path_info", {"paths": paths})["paths"]
    if creates and info[creates]["exists"]:
        return f"{creates} exists"
    if removes and not info[removes]["exists"]:
        return f"{removes} does not exist"
    return None


def _script(ctx: TaskContext, name: str) -> bytes:
    path = controller_file(ctx, name, "files")
    if not path.is_file():
        raise TaskFailed(f"Could not find or access '{name}' (found {path}, not a file)")
    return path.read_bytes()


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    reason = _guard(ctx, args)
    if reason:
        return Unchanged(f"skipped, since {reason}", {"rc": 0, "stdout": "", "stderr": "", "changed": False})
    words = _words(args)
    data = _script(ctx, words[0])
    if args.get("executable"):
        operand(args["executable"], "executable")
    shown = shlex.join([*([args["executable"]] if args.get("executable") else []), words[0], *words[1:]])
    return Change(
        f"run the script {shown}",
        payload={"script": words[0], "arguments": words[1:], "digest": hashlib.sha256(data).hexdigest()},
        fingerprint={f"script:{words[0]}": content_digest(data)},
    )


def _private_dir(ctx: TaskContext) -> tuple[str, list[int]]:
    """A fresh 0700 directory under the acting user's ~/.ansible/tmp: (path, dev and inode)."""
    home = ctx.conn.run_probe("path_info", {"paths": []})["home"]
    path = f"{home.rstrip('/')}/.ansible/tmp/rigger-script-{secrets.token_hex(8)}"
    real = ctx.conn.run_probe("fileio", {"op": "mkdir", "path": path, "mode": 0o700})["real"]
    facts = ctx.conn.run_probe("file_facts", {"paths": [real]})["paths"][real]
    return real, [facts["dev"], facts["inode"]]


def _remove(ctx: TaskContext, path: str, identity: list[int]) -> None:
    ctx.conn.run_probe("file_set", {"ops": [{"op": "remove", "path": path, "identity": identity}]})


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    name, arguments = change.payload["script"], change.payload["arguments"]
    data = _script(ctx, name)
    if hashlib.sha256(data).hexdigest() != change.payload["digest"]:
        raise TaskFailed(f"the script {name} changed on the controller since it was planned; not run")
    try:
        directory, identity = _private_dir(ctx)
    except ProbeError as exc:
        raise TaskFailed(f"cannot make a private directory for the script: {exc}") from None
    try:
        target = f"{directory}/{name.rpartition('/')[2]}"
        ctx.conn.write_file(target, data, mode=0o700)
        head = [operand(args["executable"], "executable")] if args.get("executable") else []
        done = ctx.conn.run([*head, target, *arguments], cwd=args.get("chdir"), check=False)
    finally:
        _remove(ctx, directory, identity)
    result = {
        "rc": done.rc,
        "stdout": done.stdout,
        "stdout_lines": done.stdout.splitlines(),
        "stderr": done.stderr,
        "stderr_lines": done.stderr.splitlines(),
    }
    if done.rc != 0:
        raise TaskFailed(f"non-zero return code {done.rc}\n{done.tail()}".rstrip(), result)
    return Result(changed=True, msg=change.summary, data=result)

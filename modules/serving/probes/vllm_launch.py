"""Start vLLM detached in its own session and record it in a state file on the host.

Args: ``argv``, ``env`` (added to this process's environment; may hold the API key, which
is never written anywhere), ``log_path``, ``state_path``, ``record`` (what else to store in
the state file: spec hash, port, public env...), ``cwd``.

The server is started through a short-lived intermediate process that forks it and
exits, so the server is nobody's child here: it is re-parented to init, lives in a new
session (setsid) whose id is its pid, reads stdin from /dev/null and writes stdout and
stderr to the log file (the previous log is kept as ``LOG.prev``). It survives the SSH
connection and the controller. Answer: the state record written (pid, start_time, sid...),
or ``error`` when the launcher could not be executed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

MUTATES = True
USES = ("procs", "fileio")

import base64
import json
import os
import subprocess
import sys
import time

# Runs in the intermediate process; reads its instructions as JSON on stdin.
_DETACH = r"""
import json, os, sys
spec = json.loads(sys.stdin.read())
read_end, write_end = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        os.close(read_end)
        os.setsid()
        os.chdir(spec["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(spec["log_fd"], 1)  # opened by fileio: never through a symlink
        os.dup2(spec["log_fd"], 2)
        env = dict(os.environ)
        env.update(spec["env"])
        os.execvpe(spec["argv"][0], spec["argv"], env)
    except BaseException as exc:
        failure = {"type": type(exc).__name__, "text": getattr(exc, "strerror", None) or str(exc)}
        os.write(write_end, json.dumps(failure).encode())
    os._exit(127)
os.close(write_end)
error = os.read(read_end, 4096).decode("utf-8", "replace")
print(json.dumps({"pid": pid, "error": error or None}))
"""


def _prepare(path: str, mode: int) -> None:
    call("fileio", {"op": "mkdir", "path": os.path.dirname(path), "mode": mode})


def _rotate_log(log_path: str) -> None:
    call("fileio", {"op": "rename", "path": log_path, "new_name": os.path.basename(log_path) + ".prev"})


def _write_state(state_path: str, record: dict[str, Any]) -> None:
    data = base64.b64encode(json.dumps(record, indent=2, sort_keys=True).encode()).decode()
    call("fileio", {"op": "write", "path": state_path, "data": data, "mode": 0o600})


def _identity(pid: int) -> dict[str, Any]:
    """pid + start time + boot id: what names the started process for good (recorded_tree)."""
    answer = call("procs", {"pids": [pid]})
    found = answer["processes"]
    return {"pid": pid, "start_time": found[0]["start_time"] if found else None, "boot_id": answer["boot_id"]}


def _not_executed(program: str, failure: dict[str, str]) -> str:
    """Why the program did not start, in words that say what to do (not the errno text
    of the last directory execvp tried)."""
    if failure["type"] == "FileNotFoundError":
        where = "" if "/" in program else " on the host's PATH"
        return (
            f"could not execute {program!r}: no such program{where}. Install it there (ensure_vllm"
            f" installs vLLM), or give the full path of the executable (serve_vllm's launcher)"
        )
    if failure["type"] == "PermissionError":
        return f"could not execute {program!r}: permission denied (not executable, or a directory); chmod +x it"
    return f"could not execute {program!r}: {failure['text']}"


def main(args: dict[str, Any]) -> dict[str, Any]:
    log_path = os.path.abspath(os.path.expanduser(args["log_path"]))
    state_path = os.path.abspath(os.path.expanduser(args["state_path"]))
    _prepare(state_path, 0o700)
    _prepare(log_path, 0o755)
    _rotate_log(log_path)
    spec = {
        "argv": list(args["argv"]),
        "env": {str(k): str(v) for k, v in (args.get("env") or {}).items()},
        "log_path": log_path,
        "cwd": os.path.expanduser(args.get("cwd") or "~"),
    }
    log_fd = call("fileio", {"op": "open_append", "path": log_path, "mode": 0o640})["fd"]
    try:
        helper = subprocess.run(
            [sys.executable, "-c", _DETACH],
            input=json.dumps({**spec, "log_fd": log_fd}).encode(),
            capture_output=True,
            timeout=60,
            check=False,
            pass_fds=(log_fd,),
        )
    finally:
        os.close(log_fd)
    if helper.returncode != 0:
        return {"error": "could not start the launcher: " + helper.stderr.decode()[-500:]}
    started = json.loads(helper.stdout.decode())
    if started["error"]:
        return {"error": _not_executed(spec["argv"][0], json.loads(started["error"]))}
    pid = started["pid"]
    record = dict(args.get("record") or {})
    record.update(
        {
            **_identity(pid),
            "sid": pid,
            "argv": spec["argv"],
            "log_path": log_path,
            "state_path": state_path,
            "launched_at": time.time(),
        }
    )
    _write_state(state_path, record)
    return record

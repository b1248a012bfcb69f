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
USES = ("procs",)

import json
import os
import subprocess
import sys
import tempfile
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
        log = os.open(spec["log_path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        env = dict(os.environ)
        env.update(spec["env"])
        os.execvpe(spec["argv"][0], spec["argv"], env)
    except BaseException as exc:
        os.write(write_end, ("%s: %s" % (type(exc).__name__, exc)).encode())
    os._exit(127)
os.close(write_end)
error = os.read(read_end, 4096).decode("utf-8", "replace")
print(json.dumps({"pid": pid, "error": error or None}))
"""


def _prepare(path: str, mode: int) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=mode, exist_ok=True)


def _rotate_log(log_path: str) -> None:
    if os.path.exists(log_path):
        os.replace(log_path, log_path + ".prev")


def _write_state(state_path: str, record: dict[str, Any]) -> None:
    directory = os.path.dirname(state_path)
    fd, tmp = tempfile.mkstemp(prefix=".rigger-", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, 0o600)
    os.replace(tmp, state_path)


def _start_time(pid: int) -> int | None:
    answer = call("procs", {"pids": [pid]})["processes"]
    return answer[0]["start_time"] if answer else None


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
    helper = subprocess.run(
        [sys.executable, "-c", _DETACH],
        input=json.dumps(spec).encode(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    if helper.returncode != 0:
        return {"error": "could not start the launcher: " + helper.stderr.decode()[-500:]}
    started = json.loads(helper.stdout.decode())
    if started["error"]:
        return {"error": f"could not execute {spec['argv'][0]!r}: {started['error']}"}
    pid = started["pid"]
    record = dict(args.get("record") or {})
    record.update(
        {
            "pid": pid,
            "sid": pid,
            "start_time": _start_time(pid),
            "argv": spec["argv"],
            "log_path": log_path,
            "state_path": state_path,
            "launched_at": time.time(),
        }
    )
    _write_state(state_path, record)
    return record

"""Decoy processes for the tests that really signal: started by the test, holding a
decoy GPU device, reaped at the end.

A process "holds a GPU" as ensure_gpus_idle checks it on a real host: it has
/dev/nvidia0 open. Here that device is a decoy: the process runs in its own private mount
namespace (unshare -m) with a tmpfs over /dev holding a nvidia0 node that is really
/dev/null (1:3). Needs root (as the test suite runs).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest

from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.module_api import TaskContext

# Runs argv with fd 3 open on a decoy /dev/nvidia0, in a private mount namespace (so the
# tmpfs over /dev is seen by the decoy alone); unshare and sh exec, so the pid is argv's.
GPU_DECOY = [
    "unshare",
    "--mount",
    "--propagation",
    "private",
    "--",
    "sh",
    "-c",
    "mount -t tmpfs -o size=64k,mode=755 rigger-decoy-dev /dev && mknod -m 666 /dev/nvidia0 c 1 3 "
    '&& mknod -m 666 /dev/null c 1 3 && exec 3<>/dev/nvidia0 && exec "$@"',
    "gpu-decoy",
]


def gpu_holder_argv(argv: list[str]) -> list[str]:
    """argv run as a GPU holder: with the decoy /dev/nvidia0 open (see GPU_DECOY)."""
    return [*GPU_DECOY, *argv]


def wait_holding(pid: int, timeout_s: float = 10.0) -> int:
    """Wait until the decoy has /dev/nvidia0 open, so the module sees a proven holder."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if os.readlink(f"/proc/{pid}/fd/3") == "/dev/nvidia0":
                return pid
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"decoy {pid} never opened /dev/nvidia0")


class Spawner:
    """Starts real processes for a test and reaps whatever is left at the end."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.orphans: list[tuple[int, int]] = []

    def adopt(self, pid: int) -> int:
        """Remember a grandchild (pid, start time) so cleanup can kill it if it is left."""
        self.orphans.append((pid, start_time(pid)))
        return pid

    def __call__(self, argv: list[str], *, holding_gpu: bool = False, **kwargs: Any) -> subprocess.Popen[bytes]:
        if holding_gpu:
            argv = gpu_holder_argv(argv)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        proc = subprocess.Popen(argv, **kwargs)
        self.procs.append(proc)
        return proc

    def python(self, code: str, **kwargs: Any) -> subprocess.Popen[bytes]:
        return self([sys.executable, "-c", textwrap.dedent(code)], **kwargs)

    def cleanup(self) -> None:
        for pid, started in self.orphans:
            if alive(pid) and start_time(pid) == started:
                os.kill(pid, signal.SIGKILL)
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def ctx() -> TaskContext:
    return TaskContext(host_name="localhost", conn=ScopedConnection(LocalConnection()), facts={}, vars={})


def planning() -> TaskContext:
    return TaskContext(host_name="localhost", conn=ScopedConnection(LocalConnection()).planning(), facts={}, vars={})


def start_time(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[19])


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_started(*procs: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """Wait until each process runs its own program, so /proc shows the final command line."""
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        while _still_starting(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.poll() is None, f"helper process {proc.args!r} exited early"
        assert not _still_starting(proc.pid), f"helper process {proc.args!r} not started after {timeout_s}s"


def session_members(sid: int, names: tuple[str, ...] = (), timeout_s: float = 30.0) -> dict[str, int]:
    """The session's processes by the first word of their command line, once every name in
    ``names`` has exec'd (a loaded machine takes a while to start a session's children)."""
    deadline = time.monotonic() + timeout_s
    while True:
        table = LocalConnection().run_probe("procs", {"sid": sid})
        members = {p["cmdline"].split()[0]: p["pid"] for p in table["processes"] if p["cmdline"]}
        if all(name in members for name in names) or time.monotonic() > deadline:
            return members
        time.sleep(0.02)


def session_pid(sid: int, marker: str, timeout_s: float = 30.0) -> int:
    """The pid of the session's process whose command line holds ``marker``, once it has exec'd."""
    deadline = time.monotonic() + timeout_s
    while True:
        table = LocalConnection().run_probe("procs", {"sid": sid})
        found = [p["pid"] for p in table["processes"] if marker in p["cmdline"]]
        if found:
            return int(found[0])
        assert time.monotonic() < deadline, f"no process with {marker!r} in session {sid}"
        time.sleep(0.02)


# Before a spawned process runs its program it is this test process (forked, not exec'd
# yet) or one of the wrappers that exec it: GPU_DECOY's unshare and sh, setpriv (another
# user), `bash -c "exec -a NAME ..."` (a process name of the test's choosing).
_WRAPPERS = (b"unshare", b"setpriv", b"sh")


def _still_starting(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read()
    except OSError:
        return True
    argv = cmdline.split(b"\0")
    return cmdline in (b"", _OWN_CMDLINE) or argv[0] in _WRAPPERS or argv[:2] == [b"bash", b"-c"]


with open("/proc/self/cmdline", "rb") as _own:
    _OWN_CMDLINE = _own.read()


@pytest.fixture
def spawn() -> Iterator[Spawner]:
    spawner = Spawner()
    yield spawner
    spawner.cleanup()

"""The per-host run lock: one rigger run at a time on a host.

Everything about it lives in this package: ``acquire``/``release`` here, the holders
(``holders.py``), the host-side flock code (``lockfile.py``) and the run's per-machine
bookkeeping (``engine/run/hostlocks.py``). A connection takes the lock through its
``hold_run_lock`` method, which picks the holder its transport supports.

``acquire(conn, owner)`` starts a small holder process ON the host (over the run's SSH
connection, or as a local child) that takes ``flock`` on ``~/.cache/rigger/run.lock``
(of the login user) and writes who holds it: owner, controller host and pid, start time,
holder pid. The holder keeps the lock until ``release`` or until its stdin closes, which
happens when the controller dies or its SSH connection drops; it also gives up when the
controller's heartbeat stops for ``stale_after_s``. So a lock never outlives its run:

- a second run fails at once with ``RunLocked`` naming the holder, or, given a wait
  (``--lock-wait``, ``rigger_run_lock_wait_s``), tries again until then, saying who holds it;
- a record whose holder is gone (flock free) is a dead run: it is taken over and the
  handle carries a warning saying whose lock was replaced;
- a lock held by this very run (two inventory names for one machine and login user) is
  shared, not refused: the handle is marked ``shared`` and its release does nothing.

May import: engine.errors, engine.probes.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engine.errors import HostUnreachable

DEFAULT_LOCK_PATH = "~/.cache/rigger/run.lock"
# Where the lock file lives instead, on every host (one file per login user: the host fills
# in {uid}). The test suite sets it per test run, so its runs never meet a user's.
STATE_DIR_ENV = "RIGGER_STATE_DIR"
WAIT_POLL_S = 1.0
WAIT_REPORT_EVERY_S = 10.0
HEARTBEAT_S = 10.0
STALE_AFTER_S = 60.0
ANSWER_TIMEOUT_S = 15.0
READY = "rigger-runlock "
RUN_ID = uuid.uuid4().hex  # this controller process; tells "our own lock" from another run's
_RECORD_KEYS = (
    "owner",
    "controller_host",
    "controller_pid",
    "started_at",
    "holder_pid",
    "user",
)

# the lock file code comes first (its ``from __future__`` import); only a comment before it:
# the rigger-host-process mark (procs.OWN_MARK) that keeps the holder from ever being signalled
_HOLDER = r"""# rigger-host-process
%(probe)s
import json, select, sys
args = json.loads(sys.stdin.readline())
answer = acquire(args)
fd = answer.pop("fd", None)
sys.stdout.write(%(ready)r + json.dumps(answer) + "\n")
sys.stdout.flush()
if fd is not None:
    stdin = sys.stdin.fileno()
    buffered = b""
    while True:
        ready, _, _ = select.select([stdin], [], [], args["stale_after_s"])
        chunk = os.read(stdin, 4096) if ready else b""
        if not chunk:
            break  # controller gone (EOF) or silent too long: keep the record, drop the lock
        buffered += chunk
        if b"release\n" in buffered:
            release(fd)
            sys.stdout.write("released\n")
            sys.stdout.flush()
            break
"""


class RunLocked(HostUnreachable):
    """Another rigger run holds this host's run lock; the host is left untouched."""


class LockHolder(Protocol):
    """The process (or remote python) that keeps a host's lock: heartbeat, release, close."""

    def send(self, data: bytes) -> None: ...
    def read_line(self, timeout_s: float) -> str: ...
    def close(self) -> None: ...


class LockTaker(Protocol):
    """What ``acquire`` needs of a connection (``engine.connection.base.Connection`` is one):
    its host's name and a way to start a holder there. A protocol, so that this package
    stays below ``engine.connection``, which builds on it."""

    @property
    def host_name(self) -> str: ...

    def hold_run_lock(self, request: Mapping[str, Any]) -> tuple[LockHolder, dict[str, Any]]: ...


@dataclass
class LockHandle:
    host_name: str
    path: str
    record: dict[str, Any]
    warning: str | None
    holder: LockHolder | None = field(repr=False)
    released: bool = False
    shared: bool = False
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)


def owner_description(playbook_path: str) -> str:
    """What the lock records as its owner: who runs which playbook from where."""
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}: rigger run {os.path.abspath(playbook_path)}"


def lockfile_source() -> str:
    """The host-side lock code (``lockfile.py``), sent to the host as text with the
    state-file primitive it opens the lock file by (engine/probes/fileio.py)."""
    fileio = (Path(__file__).parent.parent / "probes" / "fileio.py").read_text(encoding="utf-8")
    lockfile = (Path(__file__).parent / "lockfile.py").read_text(encoding="utf-8")
    return f"{lockfile}\nFILEIO_SOURCE = {fileio!r}\n"


def holder_program() -> str:
    """The holder process's program: ``python -c PROGRAM``; its first stdin line is the request."""
    return _HOLDER % {"probe": lockfile_source(), "ready": READY}


def lock_path(environ: Mapping[str, str] = os.environ) -> str:
    """The lock file on the host: ~/.cache/rigger/run.lock, or under $RIGGER_STATE_DIR."""
    state_dir = environ.get(STATE_DIR_ENV, "")
    return f"{state_dir.rstrip('/')}/run-{{uid}}.lock" if state_dir else DEFAULT_LOCK_PATH


def acquire_waiting(
    conn: LockTaker,
    owner_description: str,
    wait_s: float,
    waiting: Callable[[str], None],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> LockHandle:
    """``acquire``, tried again for up to ``wait_s`` seconds while another run holds the
    lock; ``waiting`` is told who holds it at once and then every few seconds."""
    started = clock()
    reported: float | None = None
    while True:
        try:
            return acquire(conn, owner_description)
        except RunLocked as exc:
            waited = clock() - started
            if waited >= wait_s:
                if wait_s <= 0:
                    raise
                raise RunLocked(f"{exc} (waited {waited:.0f}s, the most allowed: {wait_s:g}s)") from None
            if reported is None or clock() - reported >= WAIT_REPORT_EVERY_S:
                waiting(f"waiting for the run lock ({waited:.0f}s of {wait_s:g}s): {exc}")
                reported = clock()
            sleep(min(WAIT_POLL_S, wait_s - waited))


def acquire(
    conn: LockTaker,
    owner_description: str,
    *,
    path: str | None = None,
    stale_after_s: float = STALE_AFTER_S,
    run_id: str = RUN_ID,
) -> LockHandle:
    """Take the host's run lock or raise ``RunLocked`` naming the holder. Never waits."""
    path = path or lock_path()
    host = conn.host_name
    record = {
        "owner": owner_description,
        "controller_host": socket.gethostname(),
        "controller_pid": os.getpid(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "run_id": run_id,
    }
    request = {"path": path, "record": record, "stale_after_s": stale_after_s}
    holder, answer = conn.hold_run_lock(request)
    dying = _holder_of_a_dead_run(answer)
    if dying is not None:  # its holder has not exited yet: ask once more, waiting for that exit
        holder.close()
        holder, answer = conn.hold_run_lock({**request, "dying_holder_pid": dying})
    if not answer["acquired"]:
        holder.close()
        if answer.get("refused"):
            raise HostUnreachable(f"{host}: cannot take the run lock: {answer['refused']}")
        if (answer.get("holder") or {}).get("run_id") == run_id:
            return LockHandle(host, answer["path"], answer["holder"], None, None, shared=True)
        raise RunLocked(f"{host}: {describe_holder(answer['holder'], answer['path'])}")
    handle = LockHandle(host, answer["path"], answer["record"], _takeover(host, answer), holder)
    _start_heartbeat(handle, min(HEARTBEAT_S, stale_after_s / 4))
    return handle


def _holder_of_a_dead_run(answer: Mapping[str, Any]) -> int | None:
    """The holder pid of a lock whose controller ran on this machine and is gone.

    A killed run's holder learns of the death when its stdin closes, and exits: until its
    exit the flock is still held, and a run started at once saw a held lock naming a dead
    controller (tests/integration/local/test_run_lock.py, one fast-tier run in three).
    Only a controller of this machine can be proven dead; a reused pid reads as alive,
    which keeps the lock (the safe side).
    """
    holder = answer.get("holder") or {}
    if answer.get("acquired") or holder.get("controller_host") != socket.gethostname():
        return None
    try:
        os.kill(int(holder["controller_pid"]), 0)
    except ProcessLookupError:
        return int(holder["holder_pid"]) if holder.get("holder_pid") else None
    except (KeyError, ValueError, TypeError, PermissionError):
        return None
    return None


def release(handle: LockHandle) -> None:
    """Give the lock back and clear its record. Safe to call twice."""
    if handle.released or handle.holder is None:
        handle.released = True
        return
    handle.released = True
    handle._stop.set()
    try:
        handle.holder.send(b"release\n")
        handle.holder.read_line(ANSWER_TIMEOUT_S)
    except (OSError, EOFError, TimeoutError, HostUnreachable):
        pass  # the holder is gone already: the lock went with it
    finally:
        handle.holder.close()


def describe_holder(holder: dict[str, Any] | None, path: str) -> str:
    if not holder:
        return f"the run lock {path} is held by a run that left no record"
    shown = {key: holder.get(key, "?") for key in _RECORD_KEYS}
    return (
        f"another rigger run holds the run lock {path}: {shown['owner']} "
        f"(controller {shown['controller_host']} pid {shown['controller_pid']}, "
        f"started {shown['started_at']}, holder pid {shown['holder_pid']} as {shown['user']})"
    )


def _takeover(host: str, answer: dict[str, Any]) -> str | None:
    previous = answer.get("previous")
    if not previous:
        return None
    return (
        f"{host}: took over the run lock {answer['path']} left by a run that is gone: "
        f"{previous.get('owner', '?')} (controller {previous.get('controller_host', '?')} "
        f"pid {previous.get('controller_pid', '?')}, started {previous.get('started_at', '?')})"
    )


def read_answer(host: str, line: str) -> dict[str, Any]:
    if not line.startswith(READY):
        said = line.strip()[:300] or "it exited without a word"
        raise HostUnreachable(
            f"{host}: the run-lock holder did not start: {said} (it is python, run as the connection user: "
            f"check ansible_python_interpreter; {STATE_DIR_ENV} names another state directory)"
        )
    answer: dict[str, Any] = json.loads(line[len(READY) :])
    return answer


def _start_heartbeat(handle: LockHandle, every_s: float) -> None:
    holder = handle.holder
    assert holder is not None

    def beat() -> None:
        while not handle._stop.wait(every_s):
            try:
                holder.send(b"ping\n")
            except (OSError, EOFError, HostUnreachable):
                return

    threading.Thread(target=beat, name=f"runlock-{handle.host_name}", daemon=True).start()

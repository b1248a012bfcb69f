"""The persistent remote interpreter ("remote python"): this file's text runs ON the host.

Started once per host (and once more under sudo when a task becomes root) as
``python3 -c SOURCE`` on one SSH exec channel. It answers framed JSON requests on
stdin/stdout (4-byte big-endian length + UTF-8 JSON), one at a time:

- ``{"op": "run", "argv", "env", "cwd", "stdin_b64", "timeout_s", "cap"}``: runs the
  command in its own session, feeds stdin, drains stdout and stderr together into capped
  buffers, kills the whole session on timeout.
- ``{"op": "probe", "name", "sources", "args"}``: runs a probe in-process (sources are
  sent once, then cached compiled).
- ``{"op": "lock" | "unlock", ...}``: takes / gives back the host's run lock, held by this
  process; an empty frame is a heartbeat that keeps the lock's watchdog quiet.

It exits (killing what it started) when its stdin closes: when the controller closes the
connection or dies. Stdlib only; whitelisted operations only, never pickle.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import selectors
import signal
import struct
import sys
import time
from collections.abc import Iterator
from typing import Any

CHUNK = 65536


class Reader:
    """Frames from the controller. While a command runs, the same descriptor is watched:
    end of input then means the controller is gone, and the command is killed."""

    def __init__(self, fd: int) -> None:
        self.fd, self.pending, self.closed = fd, b"", False
        self.last_heard = time.monotonic()

    def fill(self) -> None:
        chunk = os.read(self.fd, CHUNK)
        if not chunk:
            self.closed = True
        self.last_heard = time.monotonic()
        self.pending += chunk

    def frames(self) -> Iterator[dict[str, Any]]:
        while True:
            while len(self.pending) < 4 and not self.closed:
                self.fill()
            if len(self.pending) < 4:
                return
            size = struct.unpack(">I", self.pending[:4])[0]
            while len(self.pending) < 4 + size and not self.closed:
                self.fill()
            if len(self.pending) < 4 + size:
                return
            body, self.pending = self.pending[4 : 4 + size], self.pending[4 + size :]
            if size:  # an empty frame is the controller's heartbeat: nothing to answer
                yield json.loads(body.decode("utf-8"))


def _send(fd: int, message: dict[str, Any]) -> None:
    body = json.dumps(message, default=str).encode("utf-8")
    data = struct.pack(">I", len(body)) + body
    while data:
        written = os.write(fd, data)
        data = data[written:]


class _Capped:
    def __init__(self, cap: int) -> None:
        self.cap, self.data, self.dropped = cap, bytearray(), 0

    def feed(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.dropped += max(0, len(chunk) - max(room, 0))


CD_THEN_EXEC = 'cd "$1" && shift && exec "$@"'


class Child:
    """A command in its own session (so a timeout kills all of it), started with
    posix_spawn (a fraction of fork+exec's cost), with pipes for its three streams."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str | None, with_stdin: bool) -> None:
        if cwd:
            argv = ["/bin/sh", "-c", CD_THEN_EXEC, "sh", cwd, *argv]
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe() if with_stdin else (os.open(os.devnull, os.O_RDONLY), None)
        actions = [
            (os.POSIX_SPAWN_DUP2, in_r, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
        ]
        try:
            self.pid = os.posix_spawnp(argv[0], argv, env, file_actions=actions, setsid=True)
        except OSError:
            for fd in (out_r, err_r, in_w):
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        self.stdin, self.stdout, self.stderr = in_w, out_r, err_r

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def wait(self, deadline: float | None) -> tuple[int, bool]:
        """Exit code; a command still running at the deadline (it closed its output
        early) is killed. Returns (code, timed_out)."""
        for fd in (self.stdin, self.stdout, self.stderr):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        pause = 0.0005
        while deadline is not None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status), False
            if time.monotonic() >= deadline:
                self.kill()
                _, status = os.waitpid(self.pid, 0)
                return os.waitstatus_to_exitcode(status), True
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status), False


def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode("utf-8", "replace") if isinstance(data, str) else data).decode()


def run(request: dict[str, Any], children: set[Child], reader: Reader) -> dict[str, Any]:
    argv = request["argv"]
    stdin = base64.b64decode(request["stdin_b64"]) if request.get("stdin_b64") is not None else None
    env = dict(os.environ)
    env.update(request.get("env") or {})
    try:
        child = Child(argv, env, request.get("cwd"), stdin is not None)
    except OSError as exc:
        rc = 127 if isinstance(exc, FileNotFoundError) else 126
        return {"rc": rc, "stdout_b64": "", "stderr_b64": _b64(f"{argv[0]}: {exc.strerror}\n")}
    children.add(child)
    try:
        return _drain(child, stdin, request.get("timeout_s"), request.get("cap", 8 * 2**20), reader)
    finally:
        children.discard(child)


def _drain(child: Child, stdin: bytes | None, timeout_s: float | None, cap: int, reader: Reader) -> dict[str, Any]:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    buffers = {"stdout": _Capped(cap), "stderr": _Capped(cap)}
    selector = selectors.DefaultSelector()
    selector.register(child.stdout, selectors.EVENT_READ, "stdout")
    selector.register(child.stderr, selectors.EVENT_READ, "stderr")
    selector.register(reader.fd, selectors.EVENT_READ, "controller")
    pending = stdin or b""
    if child.stdin is not None:
        if pending:
            os.set_blocking(child.stdin, False)
            selector.register(child.stdin, selectors.EVENT_WRITE, "stdin")
        else:
            os.close(child.stdin)
            child.stdin = None
    timed_out = False
    while _reading_output(selector):
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            timed_out = True
            break
        for key, _ in selector.select(wait):
            if key.data == "stdin":
                pending = _write_some(child, selector, pending)
            elif key.data == "controller":
                reader.fill()
                if reader.closed:  # the controller is gone: end the command with us
                    child.kill()
                    selector.unregister(reader.fd)
            else:
                chunk = os.read(key.fd, CHUNK)
                if chunk:
                    buffers[key.data].feed(chunk)
                else:
                    selector.unregister(key.fd)
    selector.close()
    if timed_out:
        child.kill()
    rc, late = child.wait(deadline)
    timed_out = timed_out or late
    return {
        "rc": rc,
        "timed_out": timed_out,
        "stdout_b64": _b64(bytes(buffers["stdout"].data)),
        "stderr_b64": _b64(bytes(buffers["stderr"].data)),
        "dropped_stdout": buffers["stdout"].dropped,
        "dropped_stderr": buffers["stderr"].dropped,
    }


def _reading_output(selector: selectors.BaseSelector) -> bool:
    return any(key.data in ("stdout", "stderr") for key in selector.get_map().values())


def _write_some(child: Child, selector: selectors.BaseSelector, pending: bytes) -> bytes:
    stdin = child.stdin
    assert stdin is not None  # only called while the command's stdin is open
    try:
        written = os.write(stdin, pending[:CHUNK])
        pending = pending[written:]
    except BrokenPipeError:
        pending = b""
    except BlockingIOError:
        return pending
    if not pending:
        selector.unregister(stdin)
        os.close(stdin)
        child.stdin = None
    return pending


class Probes:
    def __init__(self) -> None:
        self.codes: dict[str, Any] = {}

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        for name, source in (request.get("sources") or {}).items():
            self.codes[name] = compile(source, "<probe " + name + ">", "exec")
        loaded: dict[str, dict[str, Any]] = {}

        def call(name: str, args: dict[str, Any] | None = None) -> Any:
            if name not in loaded:
                namespace: dict[str, Any] = {"__name__": "rigger_probe_" + name, "call": call}
                exec(self.codes[name], namespace)
                loaded[name] = namespace
            return loaded[name]["main"](dict(args or {}))

        try:
            return {"ok": call(request["name"], request.get("args") or {})}
        except Exception as exc:
            return {"error": type(exc).__name__ + ": " + str(exc)}


class RunLock:
    """The run lock held by this process (see engine/runlock/lockfile.py): it lives exactly
    as long as the remote, which ends when the controller closes the connection, dies, or
    (with a watchdog armed) stops sending heartbeats for ``stale_after_s``."""

    def __init__(self, reader: Reader, children: set[Child]) -> None:
        self.reader, self.children = reader, children
        self.held: dict[str, tuple[int, Any]] = {}

    def lock(self, request: dict[str, Any]) -> dict[str, Any]:
        namespace: dict[str, Any] = {"__name__": "rigger_runlock_lockfile"}
        exec(compile(request["source"], "<runlock lockfile>", "exec"), namespace)
        answer: dict[str, Any] = namespace["acquire"](request["args"])
        fd = answer.pop("fd", None)
        if fd is not None:
            self.held[answer["path"]] = (fd, namespace["release"])
            if request.get("stale_after_s"):
                self._watch(float(request["stale_after_s"]))
        return answer

    def unlock(self, request: dict[str, Any]) -> dict[str, Any]:
        fd, release = self.held.pop(request["path"])
        release(fd)
        return {"released": True}

    def _watch(self, stale_after_s: float) -> None:
        import threading

        def watchdog() -> None:
            while True:
                time.sleep(min(1.0, stale_after_s / 4))
                if self.held and time.monotonic() - self.reader.last_heard > stale_after_s:
                    for child in list(self.children):
                        child.kill()
                    os._exit(3)  # the controller went silent: drop the lock with us

        threading.Thread(target=watchdog, daemon=True).start()


def main() -> None:
    # keep the protocol on private descriptors; stray prints from probes go to stderr
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    children: set[Child] = set()
    probes = Probes()
    _send(proto_out, {"hello": "rigger-remote-python", "pid": os.getpid(), "uid": os.getuid()})
    try:
        reader = Reader(proto_in)
        run_lock = RunLock(reader, children)
        for request in reader.frames():
            op = request.get("op")
            if op == "run":
                answer = run(request, children, reader)
            elif op == "probe":
                answer = probes.run(request)
            elif op in ("lock", "unlock"):
                try:
                    answer = getattr(run_lock, op)(request)
                except Exception as exc:
                    answer = {"error": type(exc).__name__ + ": " + str(exc)}
            else:
                answer = {"error": "unknown op " + repr(op)}
            _send(proto_out, answer)
    finally:
        for child in list(children):
            child.kill()
    sys.exit(0)


if __name__ == "__main__":
    main()

"""The rigger CLI run inside the test process (a test harness, not a fake).

``engine.cli.exit_code`` is ``python -m engine.cli`` without the interpreter: the same click
command and the same mapping of every outcome to an exit code, minus ~0.5 s of start-up
and imports per run. What a process of its own gave a test is kept here: the environment
and working directory it was given; its own stdout and stderr (bytes in the encoding and
error handlers a real one gets on a pipe, read back as ``subprocess`` text mode does);
warnings, exceptions in threads and log records written to stderr as a bare interpreter
writes them; no file read yet (a saved plan hashes every file its command read); a time
limit. And one thing more: a process the run started that is still running when it ends
fails the run (a process of its own would have left it behind unnoticed).

A run goes to a process of its own when this process would see other GPUs than a fresh
one: its environment sets a dynamic-loader variable (LD_LIBRARY_PATH is how a test hands a
CLI run the fake NVML; the loader reads it only when a process starts), or an NVML library
is loaded here already (a test loaded the fake into this process; local probes run in the
controller's process). Tests of the entry point itself (the interpreter's exit, Ctrl-C,
the pid that holds the run lock) always start one: ``run_cli_process``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import psutil
from own_network import in_own_network

LEFTOVER_GRACE_S = 5.0


@dataclass(frozen=True)
class Outcome:
    rc: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class _Pipes:
    """How a real python writes to a pipe: stdout and stderr encoding and error handlers."""

    encoding: str
    stdout_errors: str
    stderr_errors: str


def run_cli(args: Sequence[str], *, cwd: Path | None, env: Mapping[str, str], timeout_s: float) -> Outcome:
    """``rigger ARGS`` with ``env`` over this process's environment: in this process
    unless only a process of its own sees the GPUs it should (see above)."""
    if _sees_other_gpus_here(env):
        return run_cli_process(args, cwd=cwd, env=env, timeout_s=timeout_s)
    return _run_here(args, cwd=cwd, env=env, timeout_s=timeout_s)


def run_cli_process(
    args: Sequence[str], *, cwd: Path | None, env: Mapping[str, str], timeout_s: float, own_network: bool = False
) -> Outcome:
    """``python -m engine.cli ARGS``, as a user runs it; with ``own_network``, in a network
    namespace of its own (own_network.py: no demo server or other listener is seen)."""
    argv = [sys.executable, "-m", "engine.cli", *args]
    done = subprocess.run(
        in_own_network(argv) if own_network else argv,
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    return Outcome(done.returncode, done.stdout, done.stderr)


def _sees_other_gpus_here(env: Mapping[str, str]) -> bool:
    loader_changes = any(name.startswith("LD_") and os.environ.get(name) != value for name, value in env.items())
    return loader_changes or _nvml_loaded_here()


def _nvml_loaded_here() -> bool:
    return "libnvidia-ml" in Path("/proc/self/maps").read_text()


def _run_here(args: Sequence[str], *, cwd: Path | None, env: Mapping[str, str], timeout_s: float) -> Outcome:
    from engine import cli, yamlload

    pipes = _pipes()
    out = io.TextIOWrapper(io.BytesIO(), encoding=pipes.encoding, errors=pipes.stdout_errors)
    err = io.TextIOWrapper(io.BytesIO(), encoding=pipes.encoding, errors=pipes.stderr_errors)
    codes: list[int] = []
    before = _children()
    with _environment(env), _working_directory(cwd), _streams(out, err), _bare_interpreter_reports():
        yamlload._READS.clear()  # a new process has read no file yet
        worker = threading.Thread(target=lambda: codes.append(cli.exit_code(list(args))), daemon=True)
        worker.start()
        worker.join(timeout_s)
    outcome = Outcome(codes[0] if codes else 1, _text(out, pipes), _text(err, pipes))
    assert not worker.is_alive(), f"rigger {' '.join(args)} still running after {timeout_s}s: {outcome}"
    _assert_nothing_left_running(before, args)
    return outcome


@cache
def _pipes() -> _Pipes:
    probe = "import sys; print(sys.stdout.encoding, sys.stdout.errors, sys.stderr.errors)"
    answer = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    encoding, stdout_errors, stderr_errors = answer.stdout.split()
    return _Pipes(encoding, stdout_errors, stderr_errors)


def _text(stream: io.TextIOWrapper, pipes: _Pipes) -> str:
    stream.flush()
    raw = stream.buffer.getvalue()  # type: ignore[attr-defined]
    text: str = raw.decode(pipes.encoding)
    return text.replace("\r\n", "\n").replace("\r", "\n")  # as subprocess's text mode reads


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _working_directory(cwd: Path | None) -> Iterator[None]:
    saved = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved)


@contextlib.contextmanager
def _streams(out: io.TextIOWrapper, err: io.TextIOWrapper) -> Iterator[None]:
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


@contextlib.contextmanager
def _bare_interpreter_reports() -> Iterator[None]:
    """Warnings, thread exceptions, unraisable exceptions and log records go to (the run's)
    stderr with a fresh interpreter's defaults, not to pytest's collectors."""
    root = logging.getLogger()
    saved = root.handlers[:], threading.excepthook, sys.unraisablehook
    with warnings.catch_warnings():
        warnings.resetwarnings()
        for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning, DeprecationWarning):
            warnings.simplefilter("ignore", category)
        warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
        warnings.showwarning = _show_warning
        root.handlers[:] = []  # none: logging's last resort writes WARNING and up to stderr
        threading.excepthook, sys.unraisablehook = threading.__excepthook__, sys.__unraisablehook__
        try:
            yield
        finally:
            root.handlers[:], threading.excepthook, sys.unraisablehook = saved


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _children() -> set[psutil.Process]:
    """This process's children, from each thread's /proc children list (psutil's own
    walk reads every process on the machine: ~10-60 ms, twice per run). Children are
    enough: a grandchild outlives the run only under a child that is still here, or
    under init, where no test process would see it either."""
    found = set()
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            for pid in Path(f"/proc/self/task/{task}/children").read_text().split():
                with contextlib.suppress(psutil.Error):
                    found.add(psutil.Process(int(pid)))
    return found


def _assert_nothing_left_running(before: set[psutil.Process], args: Sequence[str]) -> None:
    started = [p for p in _children() - before if _running(p)]
    _, alive = psutil.wait_procs(started, timeout=LEFTOVER_GRACE_S)
    left = [p for p in alive if _running(p)]
    assert not left, f"rigger {' '.join(args)} left processes running: " + "; ".join(
        f"pid {p.pid}: {_cmdline(p)}" for p in left
    )


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return "?"

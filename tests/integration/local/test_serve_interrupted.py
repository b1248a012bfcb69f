"""A vLLM start that a signal interrupted: recorded as "starting", waited for by the next run.

Real: the rigger CLI (a process of its own for the interrupted run, signals and all),
serve_vllm's plan and apply, the state file, a server process in its own session that
answers on its port only after loading. Not real: vLLM (tests/fakes/fake_vllm/vllm, which
"loads", its port closed as vLLM's is while it loads, until the test creates a file).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from isolated_home import own_run_lock
from test_plan_apply_whole import FIXTURE, LAUNCHER, free_port, stop_server

REPO = Path(__file__).resolve().parents[3]


def serve_book(tmp_path: Path, port: int, spec: str = "a") -> Path:
    """``spec`` names the file whose creation ends the fake's loading: a part of its argv."""
    book = tmp_path / f"serve-{spec}.yml"
    book.write_text(
        f"""\
- hosts: localhost
  gather_facts: false
  tasks:
    - name: vLLM serves
      serve_vllm:
        name: slow
        model: {tmp_path / "model"}
        served_model_name: tiny
        launcher: {LAUNCHER}
        port: {port}
        state_dir: {tmp_path / "state"}
        extra_args: ["--fake-loaded-when", "{tmp_path / spec}.loaded"]
        ready_timeout_s: 60
"""
    )
    return book


def _record_when_starting(state_file: Path, replacing: int | None, timeout_s: float = 10) -> dict[str, Any]:
    """The state file once it records a server launched by this run (not ``replacing``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            record: dict[str, Any] = json.loads(state_file.read_text())
            if record["pid"] != replacing:
                return record
        except (OSError, ValueError):  # not written yet (written whole: atomic rename)
            pass
        time.sleep(0.02)
    raise AssertionError(f"{state_file} never recorded a new server")


def _rigger(book: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "run", str(book), "--output", "jsonl"],
        env={**os.environ, "PYTHONPATH": str(REPO), **own_run_lock()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _interrupted_start(
    book: Path, state_file: Path, replacing: int | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`rigger run` stopped by SIGTERM while the server it launched loads."""
    proc = _rigger(book)
    record = _record_when_starting(state_file, replacing)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 99, out + err
    return record, [json.loads(line) for line in out.splitlines()]


def _run_ending_the_load(book: Path, loaded: Path) -> tuple[int, list[dict[str, Any]]]:
    """`rigger run`, the fake's load ended once the run says it waits for the server (or,
    should it never say so, after a few seconds: the assertions then say what it did)."""
    proc = _rigger(book)
    fallback = threading.Timer(8.0, loaded.touch)
    fallback.start()
    events = []
    assert proc.stdout is not None
    for line in proc.stdout:
        events.append(json.loads(line))
        if events[-1]["event"] == "progress" and "waiting for it" in events[-1]["message"]:
            loaded.touch()
    fallback.cancel()
    return proc.wait(timeout=20), events


def test_an_interrupted_start_is_recorded_starting_and_the_next_run_waits_for_it(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE, tmp_path / "model")
    port = free_port()
    book = serve_book(tmp_path, port)
    state_file = tmp_path / "state" / "slow.json"
    try:
        record, events = _interrupted_start(book, state_file)
        # recorded before the wait began: identity (pid, start time, boot id) and spec hash
        assert record["state"] == "starting" and record["detached"] is True, record
        assert {"pid", "start_time", "boot_id", "spec_hash"} <= set(record), record
        server = psutil.Process(int(record["pid"]))
        assert server.is_running(), "the server loads on: detached by design"
        interrupted = next(e for e in events if e["event"] == "interrupted")
        assert interrupted["signal"] == "SIGTERM" and interrupted["in_flight"] == {"localhost": "vLLM serves"}
        assert f"{state_file} records it as 'starting'" in interrupted["left_running"]["localhost"][0]
        assert "probe vllm_launch" in interrupted["touched"]["localhost"]
        recap = events[-1]
        assert recap["event"] == "recap" and recap["hosts"]["localhost"]["changed"] == 1, recap

        # loading ends only once the next run has found the server loading and waits for it
        rc, after = _run_ending_the_load(book, tmp_path / "a.loaded")
        assert rc == 0, after
        result = next(e for e in after if e["event"] == "task_result" and e["task"] == "vLLM serves")
        assert result["status"] == "ok", result  # it only waited: nothing changed
        assert f"vLLM pid {record['pid']} (launched by an interrupted run, same spec) ready" in result["msg"], result
        assert server.is_running(), "the loading server was waited for, not killed"
        ready = json.loads(state_file.read_text())
        assert ready["pid"] == record["pid"] and ready["state"] == "ready" and ready["members"], ready
    finally:
        stop_server(state_file)


def test_an_interrupted_replacement_counts_the_stop_and_another_spec_replaces_what_it_left(
    tmp_path: Path, rigger: Any
) -> None:
    """The issue's case: a healthy server replaced, the run interrupted while the new one
    loads: stopping the old one was a change, and the recap counts it. The next run wants
    yet another spec: it says the server left loading was still starting, and replaces it."""
    shutil.copytree(FIXTURE, tmp_path / "model")
    port = free_port()
    state_file = tmp_path / "state" / "slow.json"
    (tmp_path / "b.loaded").touch()
    (tmp_path / "c.loaded").touch()
    try:
        healthy = rigger("run", str(serve_book(tmp_path, port, "b")))
        assert healthy.rc == 0, healthy.stdout + healthy.stderr
        serving = json.loads(state_file.read_text())["pid"]

        # "a" never ends its load: the next run surely finds it loading
        record, events = _interrupted_start(serve_book(tmp_path, port, "a"), state_file, replacing=serving)
        assert not psutil.pid_exists(serving) or _gone(psutil.Process(serving))
        interrupted = next(e for e in events if e["event"] == "interrupted")
        assert interrupted["touched"]["localhost"][:1] == ["probe signal_procs"], interrupted
        assert events[-1]["hosts"]["localhost"]["changed"] == 1, events[-1]

        other = rigger("run", str(serve_book(tmp_path, port, "c")), "--output", "jsonl")
        assert other.rc == 0, other.stdout + other.stderr
        result = other.results("vLLM serves")[0]
        assert result["status"] == "changed", result
        assert f"pid {record['pid']} still starting" in result["msg"], result
        assert "its start was interrupted" in result["msg"], result
        assert json.loads(state_file.read_text())["pid"] != record["pid"]
    finally:
        stop_server(state_file)


def _gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True

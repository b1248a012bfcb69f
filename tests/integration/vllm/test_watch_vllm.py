"""``rigger watch`` repairing and pausing real vLLM servers.

Real: vLLM CPU (`.venv-vllm`) serving the tiny model, its processes and log, the real CLI
in a process of its own, SIGKILL, HTTP, /proc. No stand-in (no GPU is involved)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vllmkit import REPO, SAFE_DTYPE, free_port, listening, live_session_members, require_vllm, wait_until

pytestmark = pytest.mark.slow


def _playbook(tmp: Path, model: Path, port: int, heal: str, extra_args: str = '["--enforce-eager"]') -> Path:
    book = tmp / "serve.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n"
        f"  vars:\n    rigger_watch_heal: {heal}\n    serve_state: started\n"
        "  tasks:\n    - name: serve\n      serve_vllm:\n"
        f"        name: watched\n        model: {model}\n        served_model_name: tiny\n"
        f"        launcher: {require_vllm()}\n        port: {port}\n        dtype: {SAFE_DTYPE}\n"
        "        max_model_len: 256\n        gpu_memory_utilization: 0.05\n"
        f"        extra_args: {extra_args}\n        ready_timeout_s: 600\n        state_dir: {tmp / 'vllm'}\n"
        "        state: '{{ serve_state }}'\n"
    )
    return book


def _cli(*args: str, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )


def _events(state: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (state / "events.jsonl").read_text().splitlines()]


def _record(tmp: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp / "vllm" / "watched.json").read_text())
    return data


@pytest.fixture
def stopped_after() -> Iterator[list[Path]]:
    books: list[Path] = []
    yield books
    for book in books:
        _cli("run", str(book), "-e", "serve_state=stopped", timeout_s=300)


def test_a_killed_server_is_restarted_with_its_spec_unchanged(
    tiny_model: Path, tmp_path: Path, stopped_after: list[Path]
) -> None:
    port = free_port()
    book = _playbook(tmp_path, tiny_model, port, "['serve_vllm:down']")
    stopped_after.append(book)
    state = tmp_path / "watch"
    first = _cli("run", str(book))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    before = _record(tmp_path)
    os.killpg(int(before["sid"]), signal.SIGKILL)  # the whole session, as the OOM killer of a group would
    assert wait_until(lambda: not live_session_members(int(before["sid"])), 30)

    watched = _cli("watch", str(book), "--state-dir", str(state), "--cycles", "1", "--interval", "0")

    assert watched.returncode == 0, watched.stdout[-3000:] + watched.stderr[-3000:]
    after = _record(tmp_path)
    assert after["pid"] != before["pid"] and after["spec_hash"] == before["spec_hash"]
    assert listening(port)
    repaired = [e for e in _events(state) if e["event"] == "repaired"]
    assert repaired and repaired[0]["changes"][0]["kind"] == "down", _events(state)


def test_a_server_that_exits_at_once_is_paused_after_its_budget_with_the_fatal_line(
    tiny_model: Path, tmp_path: Path, stopped_after: list[Path]
) -> None:
    port = free_port()
    bad = '["--enforce-eager", "--no-such-flag"]'
    book = _playbook(tmp_path, tiny_model, port, "['serve_vllm:down', 'serve_vllm:new']", bad)
    stopped_after.append(book)
    state = tmp_path / "watch"
    watched = _cli(
        "watch", str(book), "--state-dir", str(state), "--cycles", "3", "--interval", "0",
        "--backoff", "0", "--max-repairs", "2",
    )  # fmt: skip
    assert watched.returncode == 0, watched.stdout[-3000:] + watched.stderr[-3000:]
    events = _events(state)
    assert [e["event"] for e in events].count("repair") == 2, events  # the third round found it paused
    pause = next(e for e in events if e["event"] == "pause")
    assert "no-such-flag" in pause["evidence"], pause
    assert not listening(port)


def test_a_stopped_engine_is_found_wedged_and_restarted(
    tiny_model: Path, tmp_path: Path, stopped_after: list[Path]
) -> None:
    """SIGSTOP on the EngineCore: /health still answers 200, serve_vllm's liveness check finds
    the process stopped (state T) and plans a 'down' restart, which the watcher applies."""
    port = free_port()
    book = _playbook(tmp_path, tiny_model, port, "['serve_vllm:down']")
    stopped_after.append(book)
    state = tmp_path / "watch"
    first = _cli("run", str(book))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    before = _record(tmp_path)
    engines = [pid for pid in live_session_members(int(before["sid"])) if pid != int(before["pid"])]
    assert engines, "no EngineCore beside the API server"
    for pid in engines:
        os.kill(pid, signal.SIGSTOP)

    watched = _cli("watch", str(book), "--state-dir", str(state), "--cycles", "1", "--interval", "0")

    assert watched.returncode == 0, watched.stdout[-3000:] + watched.stderr[-3000:]
    repaired = [e for e in _events(state) if e["event"] == "repaired"]
    assert repaired and repaired[0]["changes"][0]["kind"] == "down", _events(state)
    assert "wedged" in repaired[0]["changes"][0]["summary"]
    after = _record(tmp_path)
    assert after["pid"] != before["pid"] and after["spec_hash"] == before["spec_hash"]
    assert listening(port)

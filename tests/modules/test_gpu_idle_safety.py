"""ensure_gpus_idle never signals what is not proven a GPU holder or its vLLM relative.

Real: the module, the probes (/proc, /proc/PID/fd, signals), LocalConnection,
nvidia-ml-py (pynvml), setpriv (a decoy owned by another user), rigger's real remote
interpreter program (agent_remote, started by a local python exactly as SSH starts it)
and its real run-lock holder. Not real: the GPUs (the fake libnvidia-ml.so.1 of
tests/fakes/fake_nvml, or the nvidia-smi script replaying recorded CSV), and
/dev/nvidia0: a decoy device in each holder's own private mount namespace (gpudecoys).
Every process signalled is a decoy the test started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakenvml  # tests/fakes/fake_nvml (pytest pythonpath)
import pytest
from gpudecoys import Spawner, alive, ctx, planning, session_members, spawn, start_time, wait_started

from engine import runlock
from engine.connection.local import LocalConnection
from engine.connection.remote_python.client import server_source
from engine.module_api import Change, Result, TaskFailed, Unchanged
from modules.gpu import ensure_gpus_idle as mod

__all__ = ["spawn"]  # the fixture, imported

pytestmark = pytest.mark.nvml_in_process  # conftest runs these last: see cli_in_process.py
REPO = Path(__file__).resolve().parents[2]
SMI_DIR = REPO / "tests" / "fakes" / "nvidia_smi"
SMI_GPU0_UUID = "GPU-3f9a1c2e-7b41-5d0e-a6c2-19e4b8f07d31"  # query_gpu_8x_idle.csv, GPU 0
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

DEFAULTS = {
    "gpus": "all",
    "max_used_mib": 512,
    "term_timeout_s": 2,
    "timeout_s": 10,
    "kill_patterns": [],
    "protect_patterns": [],
    "only_patterns": [],
    "vllm_tree": True,
    "signal_other_users": False,
}


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    fake = fakenvml.create(tmp_path_factory.mktemp("nvml"))
    fake.load_in_this_process()
    yield fake
    os.environ.pop("FAKE_NVML_CONFIG", None)


@pytest.fixture
def smi(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The nvidia-smi path: NVML answers "driver not loaded", the recorded binary is on PATH."""
    monkeypatch.delenv("FAKE_NVML_CONFIG", raising=False)
    monkeypatch.setenv("PATH", f"{SMI_DIR}:{os.environ['PATH']}")
    return monkeypatch


def converge(args: dict[str, Any]) -> tuple[Change, Result]:
    change = mod.plan(planning(), args)
    assert isinstance(change, Change), change
    result = mod.apply(ctx(), args, change)
    assert isinstance(mod.plan(planning(), args), Unchanged)
    return change, result


# ---- who is a relative ------------------------------------------------------------------


def test_tail_and_editor_in_the_holders_session_are_never_signalled(fake: Any, spawn: Spawner, tmp_path: Path) -> None:
    """The issue's example: `tail -f vllm.log` and `vim notes.md` shared the holder's session."""
    log = tmp_path / "vllm.log"
    log.write_text("INFO started\n")
    launcher = spawn(
        [
            "bash",
            "-c",
            textwrap.dedent(f"""
                (exec -a VLLM::Worker_TP0 sleep 300) &
                tail -f {log} &
                (exec -a 'vim notes.md' sleep 300) &
                exec -a 'python -m vllm.entrypoints.openai.api_server' sleep 300
            """),
        ],
        start_new_session=True,
        holding_gpu=True,
    )
    wait_started(launcher)
    names = ("VLLM::Worker_TP0", "tail", "vim")
    members = {name: spawn.adopt(pid) for name, pid in session_members(launcher.pid, names).items() if name != "python"}
    fake.eight_gpus([fakenvml.holder(members["VLLM::Worker_TP0"], 0, 9000)])
    change, result = converge(DEFAULTS)
    assert sorted(result.data["killed_pids"]) == sorted([launcher.pid, members["VLLM::Worker_TP0"]])
    assert alive(members["tail"]), "tail -f vllm.log was signalled"
    assert alive(members["vim"]), "an editor in the holder's session was signalled"
    assert "tail" not in change.summary and "vim" not in change.summary


# ---- other users ------------------------------------------------------------------------


def test_another_users_training_job_fails_the_task_until_allowed(fake: Any, spawn: Spawner) -> None:
    trainer = spawn([*NOBODY, "bash", "-c", "exec -a 'python train.py' sleep 300"], holding_gpu=True)
    wait_started(trainer)
    fake.eight_gpus([fakenvml.holder(trainer.pid, 1, 30000)])
    with pytest.raises(TaskFailed) as failure:
        mod.plan(planning(), DEFAULTS)
    assert (
        f"pid {trainer.pid} user nobody command 'python train.py 300', 30000 MiB: "
        "not vLLM-shaped and owned by another user (nobody)"
    ) in str(failure.value)
    assert alive(trainer.pid)
    _, result = converge({**DEFAULTS, "signal_other_users": True})
    assert result.data["killed_pids"] == [trainer.pid]


def test_another_users_vllm_worker_is_ended_by_default(fake: Any, spawn: Spawner) -> None:
    worker = spawn([*NOBODY, "bash", "-c", "exec -a VLLM::Worker_TP1 sleep 300"], holding_gpu=True)
    wait_started(worker)
    fake.eight_gpus([fakenvml.holder(worker.pid, 1, 30000)])
    _, result = converge(DEFAULTS)
    assert result.data["killed_pids"] == [worker.pid]


def test_kill_patterns_never_reach_another_users_process(fake: Any, spawn: Spawner) -> None:
    tag = f"rigger-other-{os.getpid()}"
    theirs = spawn([*NOBODY, "bash", "-c", f"exec -a '{tag} notebook' sleep 300"])
    wait_started(theirs)
    fake.eight_gpus()
    with pytest.raises(TaskFailed, match=rf"pid {theirs.pid} user nobody .*matches kill_patterns but is not vLLM"):
        mod.plan(planning(), {**DEFAULTS, "kill_patterns": [tag]})
    assert alive(theirs.pid)


# ---- proof of holding a GPU ---------------------------------------------------------------


def test_a_reported_pid_with_no_nvidia_device_open_is_never_signalled(fake: Any, spawn: Spawner) -> None:
    """NVML reports a pid of another PID namespace: here that pid is an unrelated process."""
    stranger = spawn(["sleep", "300"])
    wait_started(stranger)
    fake.eight_gpus([fakenvml.holder(stranger.pid, 2, 40000)])
    with pytest.raises(TaskFailed, match=rf"pid {stranger.pid} .*has no NVIDIA device open here"):
        mod.plan(planning(), DEFAULTS)
    assert alive(stranger.pid)


def test_signal_procs_checks_the_device_on_the_host_just_before_the_signal(spawn: Spawner) -> None:
    stranger = spawn(["sleep", "300"])
    wait_started(stranger)
    target = {"pid": stranger.pid, "start_time": start_time(stranger.pid), "gpu_holder": True}
    answer = ctx().conn.run_probe("signal_procs", {"targets": [target], "term_timeout_s": 0.5})
    assert answer["skipped"] == [
        {
            "pid": stranger.pid,
            "reason": "has no NVIDIA device open (/proc/PID/fd -> /dev/nvidia*): not proven a GPU holder here",
        }
    ]
    assert alive(stranger.pid)


# ---- rigger's own processes -------------------------------------------------------------


def test_rigger_remote_interpreter_and_run_lock_holder_are_never_signalled(
    fake: Any, spawn: Spawner, tmp_path: Path
) -> None:
    """kill_patterns that match rigger's own programs plan nothing; signal_procs refuses them.

    Both are rigger's real programs (the remote python server, the run-lock holder holding
    a lock in tmp_path), started with a trailing tag argument so the patterns match these
    two decoys and nothing else on the machine; only they are offered to signal_procs.
    """
    tag = f"rigger-safety-{os.getpid()}"
    agent = spawn([sys.executable, "-c", server_source(), tag], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    holder = spawn([sys.executable, "-c", runlock.holder_program(), tag], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdin is not None and holder.stdout is not None
    request = {"path": str(tmp_path / "run.lock"), "record": {"owner": "safety test"}, "stale_after_s": 60}
    holder.stdin.write(json.dumps(request).encode() + b"\n")
    holder.stdin.flush()
    assert b'"acquired": true' in holder.stdout.readline()
    wait_started(agent, holder)
    fake.eight_gpus()
    patterns = [rf"(?s)rigger-remote-python.* {tag}$", rf"(?s)select\.select\(\[stdin\].* {tag}$"]
    outcome = mod.plan(planning(), {**DEFAULTS, "kill_patterns": patterns})
    assert isinstance(outcome, Unchanged), outcome
    targets = [{"pid": p.pid, "start_time": start_time(p.pid)} for p in (agent, holder)]
    answer = ctx().conn.run_probe("signal_procs", {"targets": targets, "term_timeout_s": 0.5})
    assert {s["pid"] for s in answer["skipped"]} == {agent.pid, holder.pid}
    assert all("rigger's own process" in s["reason"] for s in answer["skipped"]), answer
    assert alive(agent.pid) and alive(holder.pid)


# ---- reading the GPUs -------------------------------------------------------------------


def test_nvml_version_mismatch_fails_quoting_it(fake: Any) -> None:
    fake.eight_gpus(init_error=18)
    try:
        with pytest.raises(TaskFailed, match=r"cannot read the GPUs on this host: nvml: .*NVML/RM version mismatch"):
            mod.plan(planning(), DEFAULTS)
        facts = LocalConnection().run_probe("gpu_facts", {})
        assert facts["gpu_backend"] == "error"
        assert "NVML/RM version mismatch" in facts["gpu_errors"][0]
    finally:
        fake.eight_gpus()


def test_nvidia_smi_version_mismatch_exit_18_fails_quoting_it(fake: Any, smi: pytest.MonkeyPatch) -> None:
    smi.setenv("FAKE_SMI_FAIL", "18")
    with pytest.raises(
        TaskFailed, match="nvidia-smi: exit 18: Failed to initialize NVML: Driver/library version mismatch"
    ):
        mod.plan(planning(), DEFAULTS)


def test_unknown_memory_is_never_idle(fake: Any, smi: pytest.MonkeyPatch) -> None:
    smi.setenv("FAKE_SMI_GPU", "query_gpu_na_memory.csv")
    with pytest.raises(TaskFailed, match=r"GPU 0 \(GPU-5e0c7d2a-[^)]+\): memory use unknown .*\[N/A\]"):
        mod.plan(planning(), DEFAULTS)


def test_nvidia_smi_path_ends_a_proven_holder_and_refuses_an_unproven_pid(
    fake: Any, smi: pytest.MonkeyPatch, spawn: Spawner, tmp_path: Path
) -> None:
    holder = spawn(["sleep", "300"], holding_gpu=True)
    stranger = spawn(["sleep", "301"])
    wait_started(holder, stranger)
    apps = tmp_path / "apps.csv"
    smi.setenv("FAKE_SMI_APPS", str(apps))
    apps.write_text(f"{SMI_GPU0_UUID}, {stranger.pid}, /usr/bin/python3, 1187\n")
    with pytest.raises(TaskFailed, match=rf"pid {stranger.pid} .*has no NVIDIA device open here"):
        mod.plan(planning(), DEFAULTS)
    assert alive(stranger.pid)
    apps.write_text(f"{SMI_GPU0_UUID}, {holder.pid}, /usr/bin/python3, 1187\n")
    _, result = converge(DEFAULTS)
    assert result.data["killed_pids"] == [holder.pid]
    assert result.data["mib_freed"] == 0  # the recorded memory figures do not move

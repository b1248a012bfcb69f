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
import signal
import subprocess
import sys
import textwrap
import time
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


# One vLLM-shaped server tree: API server -> EngineCore -> worker (as vLLM v1 runs TP > 1).
SERVER_TREE = (
    'exec -a "python -m vllm.entrypoints.openai.api_server --served-model-name $1" bash -c '
    "'(exec -a VLLM::EngineCore bash -c \"(exec -a VLLM::Worker_TP0 sleep 300) & wait\") & wait'"
)


def _child(procs: list[dict[str, Any]], parent: int | None, prefix: str) -> int | None:
    found = [p["pid"] for p in procs if parent and p["ppid"] == parent and p["cmdline"].startswith(prefix)]
    return int(found[0]) if found else None


def _server_trees(sid: int, tags: tuple[str, ...], timeout_s: float = 30.0) -> dict[str, dict[str, int]]:
    """{tag: {"api": pid, "engine": pid, "worker": pid}} for each server tree of the session."""
    deadline = time.monotonic() + timeout_s
    while True:
        procs = LocalConnection().run_probe("procs", {"sid": sid})["processes"]
        trees: dict[str, dict[str, int]] = {}
        for tag in tags:
            api = next((int(p["pid"]) for p in procs if f"--served-model-name {tag} " in p["cmdline"]), None)
            engine = _child(procs, api, "VLLM::EngineCore")
            worker = _child(procs, engine, "VLLM::Worker")
            if api and engine and worker:
                trees[tag] = {"api": api, "engine": engine, "worker": worker}
        if len(trees) == len(tags):
            return trees
        assert time.monotonic() < deadline, f"server trees did not start: {trees}"
        time.sleep(0.02)


def test_another_teams_vllm_orphaned_in_the_same_session_is_never_signalled(
    fake: Any, spawn: Spawner, tmp_path: Path
) -> None:
    """Issue 18: two servers started from one shell that is gone (both orphans of one session);
    `gpus: [0]` ends the tree holding GPU 0 and never the other team's on GPU 1."""
    script = tmp_path / "server.sh"
    script.write_text(SERVER_TREE + "\n")
    launcher = spawn(
        ["bash", "-c", f"bash {script} ours & bash {script} theirs & wait"], start_new_session=True, holding_gpu=True
    )
    trees = _server_trees(launcher.pid, ("ours", "theirs"))
    for tree in trees.values():
        for pid in tree.values():
            spawn.adopt(pid)
    os.kill(launcher.pid, signal.SIGKILL)  # the shell that started both is gone: both are orphans
    launcher.wait()
    ours, theirs = trees["ours"], trees["theirs"]
    fake.eight_gpus([fakenvml.holder(ours["worker"], 0, 9000), fakenvml.holder(theirs["worker"], 1, 9000)])
    change, result = converge({**DEFAULTS, "gpus": [0]})
    assert sorted(result.data["killed_pids"]) == sorted(ours.values())
    assert all(alive(pid) for pid in theirs.values()), "another team's vLLM on GPU 1 was signalled"
    assert "theirs" not in change.summary


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


def test_a_pid_with_only_the_control_devices_open_is_not_a_holder(fake: Any, spawn: Spawner) -> None:
    """/dev/nvidiactl and /dev/nvidia-uvm are opened by every CUDA process, whatever GPU it
    uses: they prove nothing about GPU 0. Decoy nodes (really /dev/null) in the process's
    own mount namespace, as gpudecoys makes /dev/nvidia0."""
    ctl_only = (
        "mount -t tmpfs -o size=64k,mode=755 rigger-decoy-dev /dev && mknod -m 666 /dev/nvidiactl c 1 3 && "
        "mknod -m 666 /dev/nvidia-uvm c 1 3 && exec 3<>/dev/nvidiactl 4<>/dev/nvidia-uvm && exec sleep 300"
    )
    stranger = spawn(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", ctl_only])
    deadline = time.monotonic() + 10
    while not os.path.exists(f"/proc/{stranger.pid}/fd/4") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert os.readlink(f"/proc/{stranger.pid}/fd/4") == "/dev/nvidia-uvm"
    fake.eight_gpus([fakenvml.holder(stranger.pid, 0, 40000)])
    with pytest.raises(TaskFailed, match=rf"pid {stranger.pid} .*has no NVIDIA device open here"):
        mod.plan(planning(), DEFAULTS)
    target = {"pid": stranger.pid, "start_time": start_time(stranger.pid), "gpu_holder": True}
    answer = ctx().conn.run_probe("signal_procs", {"targets": [target], "term_timeout_s": 0.5})
    assert [s["pid"] for s in answer["skipped"]] == [stranger.pid]
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


def test_a_holder_of_another_gpus_device_node_is_not_signalled_for_this_one(spawn: Spawner) -> None:
    """The driver gives each GPU's node (/dev/nvidiaN, N its minor number): a process with
    /dev/nvidia0 open is no proof of holding the GPU whose node is /dev/nvidia1, in the
    plan (the module) and just before the signal (the probe). The decoy holds /dev/nvidia0."""
    decoy = spawn(["sleep", "300"], holding_gpu=True)
    wait_started(decoy)
    proc = ctx().conn.run_probe("procs", {"pids": [decoy.pid], "gpu_devices": True})["processes"][0]
    other = mod.Holder(gpu={"index": 1, "device_node": "/dev/nvidia1"}, pid=decoy.pid, used_mib=1, proc=proc)
    assert "not proven to hold this GPU" in str(mod._device_problem(other))
    assert mod._device_problem(mod.Holder({"index": 0, "device_node": "/dev/nvidia0"}, decoy.pid, 1, proc)) is None
    target = {"pid": decoy.pid, "start_time": start_time(decoy.pid), "gpu_holder": True}
    answer = ctx().conn.run_probe("signal_procs", {"targets": [{**target, "devices": ["/dev/nvidia1"]}]})
    assert [s["pid"] for s in answer["skipped"]] == [decoy.pid] and alive(decoy.pid)
    answer = ctx().conn.run_probe("signal_procs", {"targets": [{**target, "devices": ["/dev/nvidia0"]}]})
    assert answer["terminated"] == [decoy.pid]


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

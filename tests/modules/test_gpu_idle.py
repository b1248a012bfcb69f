"""ensure_gpus_idle against real processes and a fake GPU driver.

Real: the module, the probes (/proc, signals), LocalConnection, nvidia-ml-py (pynvml),
the processes that hold "GPU memory" (they are really signalled and really die).
Not real: the GPUs. tests/fakes/fake_nvml builds a libnvidia-ml.so.1 that pynvml loads;
it lists a registered pid as a compute process only while that pid is alive. A process
"holds a GPU" as the module checks it on a real host: it has /dev/nvidia0 open. That
device is a decoy: each holder runs in its own private mount namespace (unshare -m) with
a tmpfs over /dev holding a nvidia0 node that is really /dev/null (1:3). Every process a
test signals is a decoy the test started; nothing else on the machine is touched.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.connection.local import LocalConnection
from engine.errors import WriteRefused
from engine.module_api import Change, Result, TaskFailed, Unchanged
from modules.gpu import ensure_gpus_idle as mod

__all__ = ["spawn"]  # the fixture, imported

pytestmark = pytest.mark.nvml_in_process  # conftest runs these last: see cli_in_process.py
REPO = Path(__file__).resolve().parents[2]
FAKE_DIR = REPO / "tests" / "fakes" / "fake_nvml"


import fakenvml  # tests/fakes/fake_nvml (pytest pythonpath)
from gpudecoys import Spawner, alive, ctx, planning, session_members, session_pid, spawn, wait_started

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


def converge(args: dict[str, Any]) -> tuple[Change, Result]:
    change = mod.plan(planning(), args)
    assert isinstance(change, Change), change
    result = mod.apply(ctx(), args, change)
    again = mod.plan(planning(), args)
    assert isinstance(again, Unchanged), f"not idempotent: {again}"
    return change, result


def test_idle_gpus_are_ok_with_an_explained_message(fake: Any) -> None:
    fake.eight_gpus()
    outcome = mod.plan(planning(), DEFAULTS)
    assert isinstance(outcome, Unchanged)
    assert outcome.msg == "8 GPUs idle: 0 processes, max 3 MiB used"
    assert outcome.data["killed_pids"] == []


def test_no_driver_means_no_gpus_not_an_error(fake: Any) -> None:
    os.environ.pop("FAKE_NVML_CONFIG")
    try:
        outcome = mod.plan(planning(), DEFAULTS)
        assert isinstance(outcome, Unchanged)
        assert outcome.msg.startswith("no GPUs on this host (backend none")
        with pytest.raises(TaskFailed, match="no NVIDIA GPUs readable"):
            mod.plan(planning(), {**DEFAULTS, "gpus": [0]})
    finally:
        os.environ["FAKE_NVML_CONFIG"] = str(fake.config_path)


def test_check_mode_lists_the_holder_and_touches_nothing(fake: Any, spawn: Spawner) -> None:
    holder = spawn(["sleep", "300"], holding_gpu=True)
    wait_started(holder)
    fake.eight_gpus([fakenvml.holder(holder.pid, 2, 5000)])
    change = mod.plan(planning(), DEFAULTS)
    assert isinstance(change, Change)
    assert [t["pid"] for t in change.payload["targets"]] == [holder.pid]
    assert f"pid {holder.pid} user root command 'sleep 300', holds 5000 MiB" in change.summary
    with pytest.raises(WriteRefused):
        planning().conn.run_probe("signal_procs", {"targets": change.payload["targets"]})
    assert alive(holder.pid)


def test_terminates_the_holder_and_waits_for_memory_release(fake: Any, spawn: Spawner) -> None:
    holder = spawn(["sleep", "300"], holding_gpu=True)
    wait_started(holder)
    fake.eight_gpus([fakenvml.holder(holder.pid, 2, 5000)], release_delay_s=1.0)
    _, result = converge(DEFAULTS)
    assert not alive(holder.pid)
    assert result.changed
    assert result.data["killed_pids"] == [holder.pid]
    assert result.data["mib_freed"] == 5000
    assert result.data["seconds_waited"] >= 0.9  # the fake kept the memory for 1 s
    assert "8 GPUs idle: 0 processes, max 3 MiB used" in result.msg


def test_sigkill_after_term_timeout(fake: Any, spawn: Spawner) -> None:
    stubborn = spawn.python(
        """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring SIGTERM", flush=True)
        time.sleep(300)
    """,
        holding_gpu=True,
        stdout=subprocess.PIPE,
    )
    assert stubborn.stdout is not None
    assert stubborn.stdout.readline() == b"ignoring SIGTERM\n"  # not before: a slow start would die on TERM
    fake.eight_gpus([fakenvml.holder(stubborn.pid, 0, 1200)])
    _, result = converge({**DEFAULTS, "term_timeout_s": 0.5})
    assert result.data["sigkilled_pids"] == [stubborn.pid]
    assert stubborn.wait(5) == -signal.SIGKILL


def test_orphaned_vllm_session_goes_whole(fake: Any, spawn: Spawner) -> None:
    """The API server is SIGKILLed; EngineCore and its Worker live on, orphaned to init."""
    launcher = spawn(
        [
            "bash",
            "-c",
            textwrap.dedent("""
        (exec -a VLLM::EngineCore bash -c '(exec -a VLLM::Worker_TP0 sleep 300) & wait') &
        (exec -a bystander-in-session sleep 300) &
        echo $! > /dev/null
        exec -a 'python -m vllm.entrypoints.openai.api_server' sleep 300
    """),
        ],
        start_new_session=True,
        holding_gpu=True,
    )
    wait_started(launcher)
    members = session_members(launcher.pid, ("VLLM::EngineCore", "VLLM::Worker_TP0", "bystander-in-session"))
    engine = spawn.adopt(members["VLLM::EngineCore"])
    worker = spawn.adopt(members["VLLM::Worker_TP0"])
    bystander = spawn.adopt(members["bystander-in-session"])
    os.kill(launcher.pid, signal.SIGKILL)  # the incident: API server killed, children orphaned
    launcher.wait()
    fake.eight_gpus([fakenvml.holder(worker, i, 89000) for i in range(8)])
    change, result = converge(DEFAULTS)
    assert sorted(t["pid"] for t in change.payload["targets"]) == sorted([engine, worker])
    assert not alive(engine) and not alive(worker)
    assert alive(bystander), "a process of the session that is not vLLM must be spared"
    assert result.data["mib_freed"] == 8 * 89000


def test_kill_patterns_catch_a_process_that_holds_no_memory_yet(fake: Any, spawn: Spawner) -> None:
    starting = spawn(["bash", "-c", f"exec -a 'vllm serve /models/kimi-{os.getpid()}' sleep 300"])
    unrelated = spawn(["sleep", "301"])
    wait_started(starting, unrelated)
    fake.eight_gpus()
    _, result = converge({**DEFAULTS, "kill_patterns": [rf"^vllm serve /models/kimi-{os.getpid()} "]})
    assert result.data["killed_pids"] == [starting.pid]
    assert alive(unrelated.pid)


def test_only_selected_gpus_are_touched(fake: Any, spawn: Spawner) -> None:
    on_zero, on_one = spawn(["sleep", "300"], holding_gpu=True), spawn(["sleep", "301"], holding_gpu=True)
    wait_started(on_zero, on_one)
    fake.eight_gpus([fakenvml.holder(on_zero.pid, 0, 100 * 1024), fakenvml.holder(on_one.pid, 1, 100)])
    by_uuid = fakenvml.gpu(0)["uuid"]
    _, result = converge({**DEFAULTS, "gpus": [by_uuid]})
    assert result.data["killed_pids"] == [on_zero.pid]
    assert alive(on_one.pid)
    with pytest.raises(TaskFailed, match="no GPU 9 on this host"):
        mod.plan(planning(), {**DEFAULTS, "gpus": [9]})


# ---- refusals -------------------------------------------------------------------------


def test_refuses_to_signal_itself_or_pid_1(fake: Any) -> None:
    fake.eight_gpus([fakenvml.holder(os.getpid(), 0, 700), fakenvml.holder(1, 1, 700)])
    with pytest.raises(TaskFailed) as failure:
        mod.plan(planning(), DEFAULTS)
    text = str(failure.value)
    assert f"GPU 0 ({fakenvml.gpu(0)['uuid']}): pid {os.getpid()} user root" in text
    assert "700 MiB: never signals rigger itself" in text
    assert "GPU 1" in text and "pid 1 " in text and "never signals PID 1" in text


def test_refuses_a_protected_holder(fake: Any, spawn: Spawner) -> None:
    precious = spawn(["bash", "-c", "exec -a 'trainer --job 7' sleep 300"], holding_gpu=True)
    wait_started(precious)
    fake.eight_gpus([fakenvml.holder(precious.pid, 3, 4096)])
    with pytest.raises(
        TaskFailed,
        match=rf"GPU 3 .*pid {precious.pid} .*'trainer --job 7 300'"
        r", 4096 MiB: matches protect_patterns",
    ):
        mod.plan(planning(), {**DEFAULTS, "protect_patterns": ["^trainer"]})
    assert alive(precious.pid)


def test_only_patterns_refuse_a_holder_that_does_not_match(fake: Any, spawn: Spawner) -> None:
    other = spawn(["sleep", "300"], holding_gpu=True)
    wait_started(other)
    fake.eight_gpus([fakenvml.holder(other.pid, 5, 900)])
    with pytest.raises(TaskFailed, match=rf"pid {other.pid} .*does not match only_patterns"):
        mod.plan(planning(), {**DEFAULTS, "only_patterns": ["VLLM::"]})
    assert alive(other.pid)


def test_pid_reuse_between_plan_and_apply_is_never_signalled(fake: Any, spawn: Spawner) -> None:
    first = spawn(["sleep", "300"], holding_gpu=True)
    wait_started(first)
    fake.eight_gpus([fakenvml.holder(first.pid, 0, 2048)])
    change = mod.plan(planning(), DEFAULTS)
    assert isinstance(change, Change)
    first.kill()
    first.wait()
    second = reuse_pid(first.pid, spawn)
    with pytest.raises(TaskFailed) as failure:
        mod.apply(ctx(), {**DEFAULTS, "timeout_s": 0.5}, change)
    assert alive(second.pid), "the new process that got the old pid was signalled"
    assert f"pid {first.pid} not signalled: pid reused" in str(failure.value)


def reuse_pid(pid: int, spawn: Spawner) -> subprocess.Popen[bytes]:
    """Start a process that gets ``pid`` (ns_last_pid needs root, as CI runs)."""
    for _ in range(50):
        try:
            Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
        except OSError as exc:
            pytest.fail(f"cannot steer pid allocation to reproduce PID reuse: {exc}")
        proc = spawn(["sleep", "302"])
        if proc.pid == pid:
            wait_started(proc)
            return proc
        proc.kill()
    pytest.fail(f"could not get pid {pid} again")


def test_zombie_holder_fails_with_its_parent_named(fake: Any, spawn: Spawner) -> None:
    zombie = spawn(["true"])
    deadline = time.monotonic() + 5
    while alive(zombie.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    fake.eight_gpus([fakenvml.holder(zombie.pid, 4, 3000, report_zombie=True)])
    with pytest.raises(
        TaskFailed,
        match=rf"GPU 4 .*pid {zombie.pid} .*3000 MiB: zombie "
        rf"\(defunct\): its parent {os.getpid()}",
    ):
        mod.plan(planning(), DEFAULTS)


def test_memory_with_no_visible_process_fails(fake: Any) -> None:
    gpus = [fakenvml.gpu(i) for i in range(8)]
    gpus[6] = fakenvml.gpu(6, idle_used_mib=4100)
    fake.write(gpus)
    with pytest.raises(
        TaskFailed,
        match=r"GPU 6 \(GPU-[^)]+\): 4100 MiB used .*no process "
        r"visible",
    ):
        mod.plan(planning(), DEFAULTS)


def test_timeout_when_memory_is_not_released(fake: Any, spawn: Spawner) -> None:
    holder = spawn(["sleep", "300"], holding_gpu=True)
    wait_started(holder)
    fake.eight_gpus([fakenvml.holder(holder.pid, 7, 6000)], release_delay_s=30)
    change = mod.plan(planning(), DEFAULTS)
    assert isinstance(change, Change)
    with pytest.raises(TaskFailed, match=r"(?s)GPUs not idle after .*GPU 7 .*6003 MiB used") as err:
        mod.apply(ctx(), {**DEFAULTS, "timeout_s": 1}, change)
    assert err.value.data["killed_pids"] == [holder.pid]
    assert err.value.data["seconds_waited"] >= 1


def test_other_users_holder_is_refused_when_not_root(fake: Any, spawn: Spawner) -> None:
    """rigger runs as `nobody` (real setpriv, system python); the holder is root's."""
    if shutil.which("setpriv") is None or not Path("/usr/bin/python3").exists():
        pytest.fail("needs setpriv (util-linux) and /usr/bin/python3 to run as another user")
    holder = spawn(["sleep", "300"])
    wait_started(holder)
    shared = Path(tempfile.mkdtemp(prefix="rigger-other-user-"))
    shared.chmod(0o755)
    try:
        import pynvml

        shutil.copy(pynvml.__file__, shared / "pynvml.py")  # the real binding, readable
        config = shared / "nvml.json"
        as_nobody = fakenvml.FakeNvml(lib_path=fake.lib_path, config_path=config)
        as_nobody.eight_gpus([fakenvml.holder(holder.pid, 1, 8192)])
        config.chmod(0o644)
        script = textwrap.dedent(f"""
            import sys
            sys.path[:0] = [{str(REPO)!r}, {str(shared)!r}]
            from engine.connection.base import ScopedConnection
            from engine.connection.local import LocalConnection
            from engine.module_api import TaskContext, TaskFailed
            from modules.gpu import ensure_gpus_idle as mod
            conn = ScopedConnection(LocalConnection()).planning()
            try:
                mod.plan(TaskContext("localhost", conn, {{}}, {{}}), {DEFAULTS!r})
            except TaskFailed as exc:
                print(exc)
        """)
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd="/",
            env={"PATH": "/usr/bin:/bin", **as_nobody.env()},
        )
    finally:
        shutil.rmtree(shared)
    assert done.returncode == 0, done.stderr
    assert (
        f"pid {holder.pid} user root command 'sleep 300', 8192 MiB: owned by root, and "
        "rigger runs as uid 65534 (not root)"
    ) in done.stdout
    assert alive(holder.pid)


def test_without_gpus_kill_patterns_still_clear_an_orphaned_vllm_session(fake: Any, spawn: Spawner) -> None:
    """A CPU host: no NVML at all; the EngineCore pattern pulls in its workers and helpers."""
    unique = f"{300 + os.getpid() % 1000}.{time.time_ns() % 10**6}"  # other vLLMs may run here
    launcher = spawn(
        [
            "bash",
            "-c",
            textwrap.dedent(f"""
        (exec -a VLLM::EngineCore bash -c "(exec -a VLLM::Worker sleep {unique}) &
            (exec -a 'python -c from multiprocessing.resource_tracker import main;main(31)' sleep {unique}) &
            wait") &
        (exec -a bystander-in-session sleep {unique}) &
        exec -a 'python -m vllm.entrypoints.openai.api_server' sleep {unique}
    """),
        ],
        start_new_session=True,
    )
    wait_started(launcher)
    names = ("VLLM::EngineCore", "VLLM::Worker", "bystander-in-session")
    members = {k: spawn.adopt(v) for k, v in session_members(launcher.pid, names).items() if k != "python"}
    tracker = spawn.adopt(session_pid(launcher.pid, f"main(31) {unique}"))
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait()
    os.environ.pop("FAKE_NVML_CONFIG")
    try:
        _, result = converge({**DEFAULTS, "kill_patterns": [rf"(?s)^VLLM::EngineCore -c .*{re.escape(unique)}"]})
    finally:
        os.environ["FAKE_NVML_CONFIG"] = str(fake.config_path)
    expected = {members["VLLM::EngineCore"], members["VLLM::Worker"], tracker}
    assert set(result.data["killed_pids"]) == expected
    assert alive(members["bystander-in-session"])
    assert "no GPUs on this host" in result.msg


def sleeping_children(parent: int, timeout_s: float = 30.0) -> list[int]:
    """The parent's children that run sleep (waits until the first has exec'd)."""
    deadline = time.monotonic() + timeout_s
    while True:
        procs = LocalConnection().run_probe("procs", {})["processes"]
        found = [p["pid"] for p in procs if p["ppid"] == parent and p["cmdline"].startswith("sleep ")]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_children_of_a_spared_process_are_never_pulled_in(fake: Any, spawn: Spawner) -> None:
    """kill_patterns matches a protected parent: neither it nor its children are signalled."""
    tag = f"rigger-spared-{os.getpid()}-{time.time_ns() % 10**6}"
    parent = spawn(["bash", "-c", f"exec -a '{tag}-supervisor' bash -c 'sleep 300 & wait'"])
    wait_started(parent)
    children = sleeping_children(parent.pid)
    assert children, "the supervisor's child did not start"
    fake.eight_gpus()
    args = {**DEFAULTS, "kill_patterns": [tag], "protect_patterns": [f"{tag}-supervisor"]}
    outcome = mod.plan(planning(), args)
    assert isinstance(outcome, Unchanged), outcome
    assert alive(parent.pid) and all(alive(c) for c in children)
    for child in children:
        os.kill(child, signal.SIGKILL)

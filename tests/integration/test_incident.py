"""The incident behind rigger, end to end, with real vLLM (CPU build).

A vLLM API server is started on a tiny model, then SIGKILLed with its multiprocessing
resource tracker: its `VLLM::EngineCore` and `VLLM::Worker` live on (orphaned, same
session), hung (SIGSTOP: a SIGTERM stays pending, so vLLM cannot unlink its segments on
the way out and SIGKILL is needed), and its /dev/shm segments leak. The
orphans are registered as holding memory on 8 GPUs with compute capability 12.0. A
playbook of `ensure_gpus_idle` then `ensure_shm_clean` run through `rigger run` must
leave no orphan and no leaked segment, must not touch a segment held by an unrelated
live process, must touch nothing in check mode, and must be all ok the second time.

vLLM, the bystander and `rigger run` share a private mount namespace whose /dev is a
fresh tmpfs (unshare/nsenter, root only) with a fresh /dev/shm, so the test neither sees
nor removes segments of other programs on the machine, and their segments cannot disturb
its counts. That /dev also holds a decoy /dev/nvidia0 (a node that is really /dev/null)
which every vLLM process holds open from start-up (tests/fakes/fake_nvml/fake_cuda_device),
as CUDA processes hold the real one: ensure_gpus_idle signals only processes with an
NVIDIA device open.

Check mode and the second run go through the local connection; the cleaning run goes
over SSH through a real Debian sshd (tests/integration/ssh/sshlab.py) with become, the
probes running in rigger's remote python on the "host" (the same machine).

Real: vLLM (.venv-vllm), its processes and segments, `rigger run`, sshd, sudo, the
probes, signals, /proc, /dev/shm, nvidia-ml-py. Not real: the GPUs (tests/fakes/fake_nvml: a
libnvidia-ml.so.1 that lists a registered pid while that pid is alive).
One vLLM start for the whole module (55-95 s on 2 cores).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sshlab  # the SSH area's real-sshd harness
from ports import free_port

from engine.connection.local import LocalConnection

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
START_TIMEOUT_S = 420
WORKER_MIB = 89_000
ENGINE_MIB = 512

pytestmark = pytest.mark.slow


import fakenvml  # tests/fakes/fake_nvml (pytest pythonpath)

TASKS = """\
  tasks:
    - name: GPUs idle
      ensure_gpus_idle:
        term_timeout_s: 5
        timeout_s: 60
    - name: /dev/shm clean
      ensure_shm_clean:
        min_age_s: 0
"""
PLAYBOOK = "- hosts: localhost\n" + TASKS
SSH_PLAYBOOK = "- hosts: gpu1\n  become: true\n  gather_facts: false\n" + TASKS

KEEP_SEGMENT = """
import sys
from multiprocessing import shared_memory
segment = shared_memory.SharedMemory(create=True, size=1 << 20)
print(segment.name, flush=True)
sys.stdin.read()
segment.close()
segment.unlink()
"""


@dataclass(frozen=True)
class Incident:
    fake: Any
    playbook: Path
    shm: Path  # the private /dev/shm, seen from outside through /proc/KEEPER/root
    in_ns: tuple[str, ...]  # argv prefix that runs a command inside the namespace
    api_server: int
    orphans: dict[str, int]  # cmdline -> pid, the vLLM processes left behind
    leaked: list[str]  # /dev/shm names that only the vLLM processes had mapped
    bystander: subprocess.Popen[str]  # an unrelated live process holding a segment
    bystander_segment: str
    log: Path


def make_model(out: Path) -> Path:
    script = REPO / "scripts" / "make_tiny_model.py"
    assert script.exists(), "scripts/make_tiny_model.py is missing"
    done = subprocess.run(
        [str(VLLM_PYTHON), str(script), str(out)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"make_tiny_model failed:\n{done.stderr[-3000:]}"
    return out


def wait_healthy(port: int, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"vLLM exited {server.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    pytest.fail(f"vLLM not healthy after {START_TIMEOUT_S}s:\n{log.read_text()[-4000:]}")


def session_table(sid: int) -> list[dict[str, Any]]:
    return list(LocalConnection().run_probe("procs", {"sid": sid})["processes"])


def segments_only_mapped_by(shm: Path, pids: set[int]) -> list[str]:
    seen = LocalConnection().run_probe("shm", {"path": str(shm), "patterns": ["*"]})
    return sorted(e["name"] for e in seen["entries"] if e["in_use_by"] and set(e["in_use_by"]) <= pids)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# the nodes vLLM and rigger use, plus the decoy GPU device (1:3 is /dev/null's)
DEV_NODES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9))
DEV_NODES += (("nvidia0", 1, 3), ("nvidiactl", 1, 3))
FAKE_CUDA = REPO / "tests" / "fakes" / "fake_nvml" / "fake_cuda_device"
KEEPER = " && ".join(
    [
        "mount -t tmpfs -o size=64k,mode=755 rigger-incident-dev /dev",
        *(f"mknod -m 666 /dev/{name} c {major} {minor}" for name, major, minor in DEV_NODES),
        "ln -s /proc/self/fd /dev/fd",
        "mkdir /dev/shm",
        "mount -t tmpfs -o size=4g,mode=1777 rigger-incident-shm /dev/shm",
        "echo ready",
        "exec sleep 3600",
    ]
)


def private_shm() -> subprocess.Popen[str]:
    """A process holding a mount namespace with its own /dev, /dev/shm and a decoy GPU."""
    keeper = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", KEEPER],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert keeper.stdout is not None
    if keeper.stdout.readline().strip() != "ready":
        keeper.wait(10)
        pytest.fail(
            f"cannot make a private /dev/shm (needs root, util-linux unshare): "
            f"{keeper.stderr.read() if keeper.stderr else ''}"
        )
    return keeper


def start_vllm(model: Path, log: Path, in_ns: tuple[str, ...]) -> tuple[subprocess.Popen[bytes], int]:
    assert VLLM_PYTHON.exists(), "the vLLM CPU venv (.venv-vllm) is a prerequisite"
    port = free_port()
    argv = [
        str(VLLM_PYTHON),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--max-model-len",
        "256",
        "--dtype",
        "float32",  # not bf16: the CPU build's bf16 kernels can fault (SIGILL) on some CPUs
        "--gpu-memory-utilization",
        "0.2",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "PYTHONPATH": str(FAKE_CUDA),
        "RIGGER_FAKE_GPU_DEVICE": "/dev/nvidia0",
    }
    with log.open("wb") as out:
        server = subprocess.Popen(
            [*in_ns, *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    return server, port


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Incident]:
    work = tmp_path_factory.mktemp("incident")
    fake = fakenvml.create(work / "nvml")
    model = make_model(work / "tiny-model")
    log = work / "vllm.log"
    keeper = private_shm()
    in_ns = ("nsenter", f"--target={keeper.pid}", "--mount", "--")
    shm = Path(f"/proc/{keeper.pid}/root/dev/shm")
    server, port = start_vllm(model, log, in_ns)
    bystander = None
    try:
        wait_healthy(port, server, log)
        members = session_table(server.pid)
        vllm_pids = {p["pid"] for p in members}
        leaked = segments_only_mapped_by(shm, vllm_pids)
        os.kill(server.pid, signal.SIGKILL)  # the incident
        server.wait()
        kill_resource_tracker(server.pid)
        time.sleep(1)
        orphans = {p["cmdline"]: p["pid"] for p in session_table(server.pid) if p["state"] != "Z"}
        assert any(c.startswith("VLLM::EngineCore") for c in orphans), orphans
        assert any(c.startswith("VLLM::Worker") for c in orphans), orphans
        for pid in orphans.values():  # hung: SIGTERM cannot reach them, so no graceful unlink
            os.kill(pid, signal.SIGSTOP)
        bystander = subprocess.Popen(
            [*in_ns, sys.executable, "-c", KEEP_SEGMENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert bystander.stdout is not None
        bystander_segment = bystander.stdout.readline().strip()
        register_orphans(fake, orphans)
        playbook = work / "incident.yml"
        playbook.write_text(PLAYBOOK)
        yield Incident(fake, playbook, shm, in_ns, server.pid, orphans, leaked, bystander, bystander_segment, log)
    finally:
        for pid in {p["pid"] for p in session_table(server.pid)}:
            os.kill(pid, signal.SIGKILL)  # only what is left of the session we started
        if server.poll() is None:
            server.kill()
            server.wait()
        if bystander is not None:
            bystander.communicate("", timeout=30)
        keeper.kill()
        keeper.wait()


def kill_resource_tracker(sid: int) -> None:
    """SIGKILL multiprocessing's resource tracker too, as when the launcher's whole process
    group dies: otherwise it unlinks the segments it tracked once the orphans die, and
    which ones it tracked varies from run to run. Without it the leak is what the
    operator found: every segment the orphans had mapped stays in /dev/shm."""
    trackers = [p["pid"] for p in session_table(sid) if "multiprocessing.resource_tracker" in p["cmdline"]]
    for pid in trackers:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in trackers) and time.monotonic() < deadline:
        time.sleep(0.1)


def register_orphans(fake: Any, orphans: dict[str, int]) -> None:
    engine = next(pid for cmd, pid in orphans.items() if cmd.startswith("VLLM::EngineCore"))
    worker = next(pid for cmd, pid in orphans.items() if cmd.startswith("VLLM::Worker"))
    holders = [fakenvml.holder(worker, i, WORKER_MIB) for i in range(8)]
    holders.append(fakenvml.holder(engine, 0, ENGINE_MIB))
    fake.eight_gpus(holders, release_delay_s=1.0)


@dataclass(frozen=True)
class SshTarget:
    playbook: Path
    inventory: Path


@pytest.fixture(scope="module")
def over_ssh(incident: Incident, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshTarget]:
    """A real sshd; on the "host" the probes run in the incident's namespace as root."""
    work = tmp_path_factory.mktemp("incident-ssh")
    work.chmod(0o755)
    key = sshlab.prepare_users(work)
    server = sshlab.start_sshd(work, "incident", ("127.0.0.9",))
    known_hosts = work / "known_hosts"
    known_hosts.write_text(server.known_hosts_lines())
    env = " ".join(f"{k}={v}" for k, v in incident.fake.env().items())
    python = f"{' '.join(incident.in_ns)} env {env} {sys.executable}"
    host = sshlab.host_vars(server, key, known_hosts, ansible_python_interpreter=python)
    # The interpreter enters the incident's private /dev/shm with nsenter, which only root
    # may do: tasks get there through become, but the run lock's holder runs as the login
    # user and could not start. The lock has its own suites (ssh/test_ssh_runlock.py).
    host["rigger_run_lock"] = False
    inventory = work / "inventory.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"gpu1": host}}}))
    playbook = work / "incident-ssh.yml"
    playbook.write_text(SSH_PLAYBOOK)
    try:
        yield SshTarget(playbook, inventory)
    finally:
        server.stop()


def rigger_run(incident: Incident, *extra: str, playbook: Path | None = None) -> tuple[int, list[dict[str, Any]], str]:
    done = subprocess.run(
        [
            *incident.in_ns,
            sys.executable,
            "-m",
            "engine.cli",
            "run",
            str(playbook or incident.playbook),
            "--output",
            "jsonl",
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **incident.fake.env()},
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, events, done.stderr


def results(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["task"]: e for e in events if e["event"] == "task_result"}


def recap(events: list[dict[str, Any]], host: str = "localhost") -> dict[str, Any]:
    last = events[-1]
    assert last["event"] == "recap", last
    return dict(last["hosts"][host])


def test_the_incident_left_orphans_and_leaked_segments(incident: Incident) -> None:
    assert not alive(incident.api_server)
    assert all(alive(pid) for pid in incident.orphans.values())
    assert any(name.startswith("psm_") for name in incident.leaked), incident.leaked
    assert all((incident.shm / name).exists() for name in incident.leaked)


def test_check_mode_lists_the_orphans_and_touches_nothing(incident: Incident) -> None:
    rc, events, stderr = rigger_run(incident, "--check", "--diff")
    assert rc == 0, stderr
    found = results(events)
    gpus = found["GPUs idle"]
    assert gpus["status"] == "changed"
    for pid in incident.orphans.values():
        assert f"pid {pid} " in gpus["msg"], gpus["msg"]
    assert all(alive(pid) for pid in incident.orphans.values())
    assert all((incident.shm / name).exists() for name in incident.leaked)


def test_playbook_over_ssh_kills_orphans_and_removes_their_segments(incident: Incident, over_ssh: SshTarget) -> None:
    rc, events, stderr = rigger_run(incident, "-i", str(over_ssh.inventory), playbook=over_ssh.playbook)
    assert rc == 0, f"{stderr}\n{events}"
    found = results(events)
    gpus, shm = found["GPUs idle"]["data"], found["/dev/shm clean"]["data"]
    assert gpus["sigkilled_pids"] == sorted(incident.orphans.values())
    assert gpus["mib_freed"] == 8 * WORKER_MIB + ENGINE_MIB
    assert gpus["seconds_waited"] >= 0.9  # the fake releases memory 1 s after death
    assert not any(alive(pid) for pid in incident.orphans.values())
    gone = [n for n in incident.leaked if not (incident.shm / n).exists()]
    assert gone == incident.leaked, f"left behind: {set(incident.leaked) - set(gone)}"
    assert sorted(shm["removed"]) == sorted(incident.leaked), "ensure_shm_clean removed other segments"
    assert incident.bystander.poll() is None
    assert (incident.shm / incident.bystander_segment).exists()


def test_second_run_is_all_ok_locally(incident: Incident) -> None:
    rc, events, stderr = rigger_run(incident)
    assert rc == 0, stderr
    counts = recap(events)
    assert counts["changed"] == 0 and counts["failed"] == 0, counts
    assert results(events)["GPUs idle"]["msg"] == "8 GPUs idle: 0 processes, max 3 MiB used"


def test_second_run_is_all_ok_over_ssh(incident: Incident, over_ssh: SshTarget) -> None:
    rc, events, stderr = rigger_run(incident, "-i", str(over_ssh.inventory), playbook=over_ssh.playbook)
    assert rc == 0, stderr
    counts = recap(events, "gpu1")
    assert (counts["ok"], counts["changed"], counts["failed"]) == (2, 0, 0), counts
    assert f"{incident.bystander_segment}: in use by pid" in results(events)["/dev/shm clean"]["msg"]

"""ray_cluster over real SSH: a two-node Ray cluster brought up, healed, refused and stopped.

Real: the rigger CLI in a subprocess, paramiko, Debian's sshd answering on 127.0.0.2 and
127.0.0.3 (two "nodes" of one machine, each reached as its own inventory host), sudo, and
Ray 2.60 from the vLLM CPU venv (.venv-vllm, scripts/ci/setup_vllm.sh): its daemons, GCS,
raylets, ports and /proc. Not real: there is no GPU, so the expected resources are CPUs
(one per node), and the two nodes share one process table. The "foreign" Ray is started
by this test by hand, outside rigger, and must survive.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sshlab
from sshlab import Lab

from tests.conftest import REPO, RiggerRun, run_rigger

pytestmark = pytest.mark.slow

RAY_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
NODES = {"node-a": "127.0.0.2", "node-b": "127.0.0.3"}


def _free_port() -> int:
    return sshlab.free_port(list(NODES.values()))


class Cluster:
    """The playbook, inventory and paths of one test cluster."""

    def __init__(self, lab: Lab, work: Path) -> None:
        self.name = "t" + uuid.uuid4().hex[:8]
        self.token_path: Path | None = None
        self.port = _free_port()
        self.side_ports = (_free_port(), _free_port())  # Ray client server, dashboard
        self.state_dir = work / "state"
        self.temp_dir = f"/tmp/rigger-ray-{self.name}"  # short: Ray's socket paths must fit 107 bytes
        self.inventory = work / "hosts.yml"
        self.inventory.write_text(
            "ray_nodes:\n"
            "  vars:\n"
            f"    ansible_port: {lab.sshd.port}\n"
            f"    ansible_user: {sshlab.USER_NOPASSWD}\n"
            f"    ansible_ssh_private_key_file: {lab.client_key}\n"
            f"    known_hosts_file: {lab.known_hosts}\n"
            "    ssh_connect_timeout_s: 5\n"
            "  hosts:\n"
            + "".join(f"    {name}: {{ansible_host: {ip}, rigger_node_interface: lo}}\n" for name, ip in NODES.items())
        )
        self.work = work

    def playbook(self, state: str) -> Path:
        path = self.work / f"ray-{state}.yml"
        path.write_text(
            f"""
- hosts: ray_nodes
  gather_facts: false
  become: true
  tasks:
    - name: ray cluster
      run_once: true
      ray_cluster:
        name: {self.name}
        python: {RAY_PYTHON}
        port: {self.port}
        num_cpus: 1
        object_store_memory: 200000000
        min_cpus: 2
        temp_dir: {self.temp_dir}
        state_dir: {self.state_dir}
        extra_args: [--ray-client-server-port, "{self.side_ports[0]}", --dashboard-port, "{self.side_ports[1]}"]
        wait_timeout_s: 240
        auth_token_path: {json.dumps(str(self.token_path) if self.token_path else None)}
        state: {state}
"""
        )
        return path

    def run(self, state: str = "started", *extra: str) -> RiggerRun:
        return run_rigger(
            "run", str(self.playbook(state)), "-i", str(self.inventory), "--output", "jsonl", *extra, timeout_s=600
        )

    def record(self, node: str) -> dict[str, object]:
        data: dict[str, object] = json.loads((self.state_dir / f"{self.name}-{node}.json").read_text())
        return data


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def environ(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode(errors="replace").split("=", 1) for e in entries if b"=" in e)


def ray_processes(marker: str) -> list[int]:
    """Live processes whose command line names this cluster's temp dir or GCS address."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and marker in _cmdline(int(entry)) and _alive(int(entry)):
            found.append(int(entry))
    return found


def ray_status(port: int, token_path: Path | None) -> str:
    """Ray's own view, asked with Ray's own CLI (independent of rigger's probes)."""
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path)} if token_path else {}
    out = subprocess.run(
        [str(RAY_PYTHON), "-m", "ray.scripts.scripts", "status", "--address", f"127.0.0.2:{port}"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RAY_AUTH_MODE": "disabled", **auth},
    )
    return out.stdout + out.stderr


def active_nodes(port: int, token_path: Path | None = None, want: int = 2) -> int:
    """Active nodes in `ray status`, read until it shows ``want`` (or 90 s pass): it is the
    autoscaler's view, which follows the GCS (what rigger waits on) a few seconds later."""
    deadline = time.monotonic() + 90
    while True:
        text = ray_status(port, token_path)
        active = text.split("Active:", 1)[1].split("Pending:", 1)[0] if "Active:" in text else ""
        count = sum(1 for line in active.splitlines() if "node_" in line)
        if count == want or time.monotonic() >= deadline:
            return count
        time.sleep(2)


def listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.2", port), timeout=2):
        return True
    return False


@pytest.fixture
def cluster(lab: Lab, tmp_path: Path) -> Iterator[Cluster]:
    if not RAY_PYTHON.exists():
        pytest.fail(f"{RAY_PYTHON} is missing: run bash scripts/ci/setup_vllm.sh (it installs ray)")
    made = Cluster(lab, tmp_path)
    try:
        yield made
    finally:  # whatever the test left of its own cluster (never anything else)
        for pid in ray_processes(made.temp_dir) + ray_processes(f"127.0.0.2:{made.port}"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def foreign_ray(ip: str) -> Iterator[subprocess.Popen[bytes]]:
    """A Ray head started by hand (not by rigger) on a node's address, its own port and
    temp dir, in its own session; killed by its process group at the end."""
    temp_dir = f"/tmp/rigger-ray-foreign-{uuid.uuid4().hex[:6]}"
    argv = [str(RAY_PYTHON), "-m", "ray.scripts.scripts", "start", "--block", "--head", "--node-ip-address", ip]
    argv += ["--port", str(_free_port()), "--temp-dir", temp_dir, "--num-cpus", "1"]
    argv += ["--object-store-memory", "100000000", "--include-dashboard", "false", "--disable-usage-stats"]
    argv += ["--ray-client-server-port", str(_free_port()), "--dashboard-port", str(_free_port())]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not any("raylet" in _cmdline(pid) for pid in ray_processes(temp_dir)):
            assert proc.poll() is None and time.monotonic() < deadline, "the foreign Ray did not start"
            time.sleep(0.5)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def changed_hosts(run: RiggerRun) -> dict[str, int]:
    """Changes per node; a node that ran no task (run_once: the head ran it) is not in the
    recap, as in ansible-core's, and changed nothing."""
    return {host: run.recap.get(host, {}).get("changed", 0) for host in ("node-a", "node-b")}


def test_ray_cluster_lifecycle(cluster: Cluster) -> None:
    started = time.monotonic()
    up = cluster.run()
    bring_up_s = time.monotonic() - started
    assert up.rc == 0, up.stdout + up.stderr
    assert changed_hosts(up) == {"node-a": 1, "node-b": 0}, up.recap  # run_once: the head reports
    assert active_nodes(cluster.port) == 2
    print(f"ray_cluster bring-up of 2 nodes: {bring_up_s:.1f}s")
    for node, ip in NODES.items():  # what vLLM on this node's Ray workers will inherit
        env = environ(int(cluster.record(node)["raylet"]["pid"]))  # type: ignore[index]
        assert (env.get("VLLM_HOST_IP"), env.get("GLOO_SOCKET_IFNAME"), env.get("NCCL_SOCKET_IFNAME")) == (
            ip,
            "lo",
            "lo",
        )

    again = cluster.run()
    assert again.rc == 0, again.stdout + again.stderr
    assert changed_hosts(again) == {"node-a": 0, "node-b": 0}, again.results("ray cluster")

    # a worker's raylet dies: --check names the change and touches nothing
    worker = cluster.record("node-b")
    head_pid = cluster.record("node-a")["pid"]
    os.kill(int(worker["raylet"]["pid"]), signal.SIGKILL)  # type: ignore[index]
    deadline = time.monotonic() + 60
    while _alive(int(worker["pid"])) and time.monotonic() < deadline:  # type: ignore[arg-type]
        time.sleep(0.5)
    before = {p: _cmdline(p) for p in ray_processes(cluster.temp_dir)}
    state_before = (cluster.state_dir / f"{cluster.name}-node-b.json").read_bytes()
    check = cluster.run("started", "--check")
    assert check.rc == 0, check.stdout + check.stderr
    [planned] = check.results("ray cluster")
    # the raylet died, so its `ray start --block` ended the node: only node-b is to start
    assert planned["status"] == "changed" and "on node-b (node-b: ray start" in planned["msg"], planned
    assert {p: _cmdline(p) for p in ray_processes(cluster.temp_dir)} == before
    assert (cluster.state_dir / f"{cluster.name}-node-b.json").read_bytes() == state_before

    healed = cluster.run()
    assert healed.rc == 0, healed.stdout + healed.stderr
    assert cluster.record("node-b")["node_id"] != worker["node_id"]
    assert cluster.record("node-a")["pid"] == head_pid  # only the broken worker was restarted
    assert active_nodes(cluster.port) == 2

    # a Ray rigger did not start, on node-b's address: refused, and it survives
    with foreign_ray(NODES["node-b"]) as foreign:
        refused = cluster.run()
        assert refused.rc == 2, refused.stdout + refused.stderr
        [failed] = refused.results("ray cluster")
        assert "rigger did not start it" in failed["msg"] and "raylet" in failed["msg"], failed
        assert foreign.poll() is None

    down = cluster.run("stopped")
    assert down.rc == 0, down.stdout + down.stderr
    assert changed_hosts(down) == {"node-a": 1, "node-b": 0}
    # node-b shares this machine with the head: `ray stop --force` would stop the head too
    stopped_msg = down.results("ray cluster")[0]["msg"]
    assert "signalled its processes" in stopped_msg.split("node-b: ", 1)[1].split(";", 1)[0], stopped_msg
    print(f"stopped: {stopped_msg}")
    assert ray_processes(cluster.temp_dir) == []
    assert not listening(cluster.port)
    sockets = list(Path(cluster.temp_dir).glob("session_*/sockets/*"))
    assert sockets == [], sockets

    down_again = cluster.run("stopped")
    assert down_again.rc == 0, down_again.stdout + down_again.stderr
    assert changed_hosts(down_again) == {"node-a": 0, "node-b": 0}


def test_token_authenticated_cluster(cluster: Cluster, tmp_path: Path) -> None:
    """auth_token_path: every node and rigger's own queries use Ray's token authentication."""
    cluster.token_path = tmp_path / "ray_auth_token"
    cluster.token_path.write_text(uuid.uuid4().hex + uuid.uuid4().hex)
    cluster.token_path.chmod(0o600)
    up = cluster.run()
    assert up.rc == 0, up.stdout + up.stderr
    assert active_nodes(cluster.port, cluster.token_path) == 2
    env = environ(int(cluster.record("node-b")["raylet"]["pid"]))  # type: ignore[index]
    assert (env.get("RAY_AUTH_MODE"), env.get("RAY_AUTH_TOKEN_PATH")) == ("token", str(cluster.token_path))
    again = cluster.run()
    assert changed_hosts(again) == {"node-a": 0, "node-b": 0}, again.results("ray cluster")
    down = cluster.run("stopped")
    assert down.rc == 0, down.stdout + down.stderr
    assert ray_processes(cluster.temp_dir) == []

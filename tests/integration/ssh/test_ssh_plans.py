"""Saved plans over real SSH: plan, then apply only what was reviewed, or refuse on drift.

Real: the rigger CLI in a subprocess, Debian's sshd on 127.0.0.2, paramiko, sudo (become),
rigger's remote agent and probes on the "host" (this machine, as the SSH user), files,
processes started here and really signalled. Not real: the GPUs (tests/fakes/fake_nvml,
loaded by the host's python through ansible_python_interpreter's environment). The play
runs with become (sudo as root): the test's python lives under /root.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fakenvml
import pytest
import sshlab
from gpudecoys import gpu_holder_argv, wait_holding
from sshlab import Lab

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Host:
    tree: Path
    fake: Any
    playbook: Path
    inventory: Path


@pytest.fixture
def host(lab: Lab) -> Iterator[Host]:
    tree = Path(tempfile.mkdtemp(prefix="rigger-ssh-plan-", dir="/tmp"))
    tree.chmod(0o755)
    fake = fakenvml.create(tree / "nvml")
    fake.eight_gpus()
    for path in [tree, *tree.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o755 if path.is_dir() else path.stat().st_mode | 0o644)
    app = tree / "app"
    app.mkdir()
    (app / "app.conf").write_text("port=1\n")
    shutil.chown(app, sshlab.USER_NOPASSWD, sshlab.USER_NOPASSWD)
    shutil.chown(app / "app.conf", sshlab.USER_NOPASSWD, sshlab.USER_NOPASSWD)
    env = " ".join(f"{k}={v}" for k, v in fake.env().items())
    # The run lock's holder runs as the login user, who cannot run the test's python (under
    # /root); the lock has its own suites (test_ssh_runlock*.py).
    host_vars = lab.vars(
        address="127.0.0.2", ansible_python_interpreter=f"env {env} {sys.executable}", rigger_run_lock=False
    )
    inventory = tree / "hosts.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"gpu1": host_vars}}}))
    playbook = tree / "site.yml"
    playbook.write_text(
        "- hosts: gpu1\n  gather_facts: false\n  become: true\n  tasks:\n"
        "    - name: GPUs idle\n"
        "      ensure_gpus_idle: {term_timeout_s: 2, timeout_s: 20}\n"
        f'    - name: app config\n      write_file: {{path: {app}/app.conf, content: "port=2\\n", backup: false}}\n'
    )
    try:
        yield Host(tree, fake, playbook, inventory)
    finally:
        shutil.rmtree(tree, ignore_errors=True)


@pytest.fixture
def orphans() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def orphan(started: list[subprocess.Popen[bytes]], fake: Any) -> int:
    # a proven holder, as on a real host: the decoy /dev/nvidia0 open (gpudecoys)
    proc = subprocess.Popen(
        gpu_holder_argv(["bash", "-c", "exec -a VLLM::EngineCore sleep 600"]),
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    started.append(proc)
    wait_holding(proc.pid)
    fake.eight_gpus([fakenvml.holder(p.pid, n, 40_000) for n, p in enumerate(started) if p.poll() is None])
    return proc.pid


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def plan(rigger: Any, h: Host) -> Any:
    done = rigger("plan", str(h.playbook), "-i", str(h.inventory), "-o", str(h.tree / "plan.json"))
    assert done.rc == 0, done.stdout + done.stderr
    return done


def apply(rigger: Any, h: Host) -> Any:
    return rigger("apply", str(h.tree / "plan.json"))


def test_plan_then_apply_over_ssh_changes_the_reviewed_things(rigger: Any, host: Host, orphans: list[Any]) -> None:
    pid = orphan(orphans, host.fake)
    plan(rigger, host)
    assert alive(pid) and (host.tree / "app" / "app.conf").read_text() == "port=1\n"
    done = apply(rigger, host)
    assert done.rc == 0, done.stdout + done.stderr
    assert not alive(pid)
    assert (host.tree / "app" / "app.conf").read_text() == "port=2\n"


def test_a_process_started_since_the_plan_stops_the_host_over_ssh(rigger: Any, host: Host, orphans: list[Any]) -> None:
    first = orphan(orphans, host.fake)
    plan(rigger, host)
    second = orphan(orphans, host.fake)
    done = apply(rigger, host)
    assert done.rc == 2, done.stdout + done.stderr
    assert f"process:{second}: new since the review" in done.stdout, done.stdout
    assert alive(first) and alive(second)
    assert (host.tree / "app" / "app.conf").read_text() == "port=1\n", "the host stopped at the drift"


def test_a_file_edited_since_the_plan_stops_the_host_over_ssh(rigger: Any, host: Host, orphans: list[Any]) -> None:
    pid = orphan(orphans, host.fake)
    plan(rigger, host)
    (host.tree / "app" / "app.conf").write_text("port=7\n")
    done = apply(rigger, host)
    assert done.rc == 2, done.stdout + done.stderr
    assert f"file:{host.tree}/app/app.conf: was sha256:" in done.stdout, done.stdout
    assert not alive(pid), "the reviewed task before the drift was applied"
    assert (host.tree / "app" / "app.conf").read_text() == "port=7\n"


def test_an_edited_playbook_refuses_the_apply_over_ssh(rigger: Any, host: Host, orphans: list[Any]) -> None:
    pid = orphan(orphans, host.fake)
    plan(rigger, host)
    with host.playbook.open("a") as book:
        book.write("# edited after the review\n")
    done = apply(rigger, host)
    assert done.rc == 1 and f"{host.playbook}: edited since the plan" in done.stderr, done.stderr
    assert alive(pid) and (host.tree / "app" / "app.conf").read_text() == "port=1\n"

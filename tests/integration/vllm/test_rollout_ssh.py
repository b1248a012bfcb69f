"""The same rollout over two hosts reached by the real sshd: node0 (127.0.0.2) and node1
(127.0.0.3), each serving the tiny model with vLLM CPU, behind a real HAProxy, under load.
A good release upgrades both hosts, canary first; HAProxy answers every request of the
load generator. (A release that does not start, rolled back over SSH, passed here too in
294 s: CI's 90 minutes keep one rollout over SSH; the rollback is test_rollout.py's.)

Real: Debian's OpenSSH sshd (sshlab.py), paramiko, sudo (become: the test's state and the
HAProxy socket belong to root), vLLM CPU, HAProxy, the rigger CLI; the gates and the
runtime API are asked from the far side of SSH (the rollout task runs on node0, and node0
reaches HAProxy's socket). Not real: both "hosts" are this machine, so they share a CPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sshlab
from rolloutkit import BASE_ARGS, Fleet, rollout_under_load, serving_fleet, upgraded_everywhere
from sshlab import Lab

from tests.conftest import run_rigger

pytestmark = pytest.mark.slow
NODES = {"node0": "127.0.0.2", "node1": "127.0.0.3"}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with sshlab.running_lab(tmp_path_factory.mktemp("rollout-sshlab"), "rollout", NODES.values()) as lab:
        yield lab


@pytest.fixture(scope="module")
def fleet(lab: Lab, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    # Two vLLM servers (three while one is replaced) and a load generator on 2 cores starve
    # sshd: CI saw an authentication answer take longer than the lab's 5 s limit.
    host_vars = {name: lab.vars(address=address, ansible_become=True, ssh_connect_timeout_s=30)
                 for name, address in NODES.items()}  # fmt: skip
    with serving_fleet(tmp_path_factory.mktemp("rollout-ssh"), tiny_model, host_vars, run_rigger) as fleet:
        yield fleet


def test_a_good_release_upgrades_both_hosts_over_ssh(fleet: Fleet, rigger: Any) -> None:
    before = {h: fleet.state(h) for h in fleet.hosts}
    playbook = fleet.playbook("ssh-good", fleet.model, [*BASE_ARGS, "--shutdown-timeout", "5"])
    run, record = rollout_under_load(fleet, "ssh-good", playbook, rigger)
    upgraded_everywhere(fleet, run, record, before, "--shutdown-timeout")

"""delegate_to over real SSH: the delegated host is reached with its own connection
variables, while the task keeps the original host's variables.

Real: the rigger CLI in a subprocess, paramiko, Debian's sshd on 127.0.0.2/127.0.0.3 with
two different login users, the local connection for an implicit localhost.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sshlab
from sshlab import Lab

from tests.conftest import run_rigger

pytestmark = pytest.mark.slow


def test_delegated_task_logs_in_as_the_delegated_hosts_user(lab: Lab, tmp_path: Path):
    (tmp_path / "hosts.yml").write_text(
        "all:\n"
        "  vars:\n"
        f"    ansible_port: {lab.sshd.port}\n"
        f"    ansible_ssh_private_key_file: {lab.client_key}\n"
        f"    known_hosts_file: {lab.known_hosts}\n"
        "    ssh_connect_timeout_s: 3\n"
        "  hosts:\n"
        f"    gpu1: {{ansible_host: 127.0.0.2, ansible_user: {sshlab.USER_NOPASSWD}}}\n"
        f"    gpu2: {{ansible_host: 127.0.0.3, ansible_user: {sshlab.USER_NOSUDO}}}\n"
    )
    (tmp_path / "p.yml").write_text(
        """
- hosts: gpu1
  gather_facts: false
  tasks:
    - command: id -un
      register: own
    - command: id -un
      delegate_to: gpu2
      register: other
    - command: id -un
      delegate_to: localhost
      register: control
    - debug:
        msg: "{{ inventory_hostname }} {{ own.stdout }} {{ other.stdout }} {{ control.stdout }}"
"""
    )
    run = run_rigger("run", str(tmp_path / "p.yml"), "-i", str(tmp_path / "hosts.yml"), "--output", "jsonl")
    assert run.rc == 0, run.stdout + run.stderr
    [shown] = [r["msg"] for r in run.results("debug")]
    assert shown == f"gpu1 {sshlab.USER_NOPASSWD} {sshlab.USER_NOSUDO} root"

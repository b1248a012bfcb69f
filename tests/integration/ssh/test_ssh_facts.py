"""Ansible's setup facts gathered over real SSH, as the login user and, with become, as root.

Real: the rigger CLI in a subprocess, paramiko, Debian's sshd on loopback, the SSH test
user and its sudo rule; the facts are this machine's, seen through that login.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sshlab
import yaml
from sshlab import Lab

pytestmark = pytest.mark.slow

BOOK = """\
- name: as the login user
  hosts: all
  tasks:
    - debug:
        msg: >-
          {{ ansible_user_id }} {{ ansible_env.HOME }}
          {{ ansible_facts.distribution == ansible_distribution }} {{ facts.gpu_count }}
- name: with become
  hosts: all
  become: true
  tasks:
    - debug:
        msg: "{{ ansible_user_id }} {{ ansible_env.HOME }}"
"""


def test_facts_are_the_login_users_and_roots_with_become(rigger, lab: Lab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"gpu1": lab.vars()}}}))
    book = tmp_path / "site.yml"
    book.write_text(BOOK)
    run = rigger("run", str(book), "-i", str(inventory), "--output", "jsonl", timeout_s=120)
    assert run.rc == 0, run.stdout + run.stderr
    said = [e["data"]["msg"] for e in run.events if e.get("event") == "task_result" and e.get("task") == "debug"]
    assert said == [f"{sshlab.USER_NOPASSWD} /home/{sshlab.USER_NOPASSWD} True 0", "root /root"]

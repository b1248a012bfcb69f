"""A module rigger implements is accepted under the name its collection gives it, as Ansible
resolves it (ansible.builtin.*, ansible.posix.*, community.general.*); other collections'
modules stay refused by name.

Real: the registry and the playbook loader through `rigger validate`. Nothing is stubbed."""

from __future__ import annotations

import pytest

from engine import registry

# FQCN -> rigger's module, and arguments that module accepts
FQCNS = {
    "ansible.builtin.ping": ("ping", "{}"),
    "ansible.builtin.find": ("find", "{paths: /tmp}"),
    "ansible.builtin.get_url": ("get_url", "{url: 'http://127.0.0.1/x', dest: /tmp/x}"),
    "ansible.builtin.uri": ("uri", "{url: 'http://127.0.0.1/'}"),
    "ansible.builtin.yum": ("yum", "{name: vim}"),
    "ansible.builtin.dnf": ("dnf", "{name: vim}"),
    "ansible.builtin.group_by": ("group_by", "{key: gpus}"),
    "ansible.legacy.ping": ("ping", "{}"),
    "ansible.posix.sysctl": ("sysctl", "{name: vm.swappiness, value: '10'}"),
    "ansible.posix.authorized_key": ("authorized_key", "{user: root, key: 'ssh-ed25519 AAAAC3 x'}"),
    "community.general.modprobe": ("modprobe", "{name: nvidia_peermem}"),
    "ansible.posix.mount": ("mount", "{path: /models, src: 'nas:/m', fstype: nfs, state: mounted}"),
    "ansible.builtin.unarchive": ("unarchive", "{src: /tmp/x.tgz, dest: /opt, remote_src: true}"),
    "ansible.builtin.script": ("script", "{cmd: setup.sh}"),
    "ansible.builtin.apt_repository": ("apt_repository", "{repo: 'deb http://deb.debian.org/debian bookworm main'}"),
    "ansible.builtin.apt_key": ("apt_key", "{id: 3BF863CC, keyring: /usr/share/keyrings/cuda.gpg}"),
    "ansible.builtin.git": ("git", "{repo: 'https://example.org/x.git', dest: /opt/x}"),
    "ansible.builtin.systemd": ("systemd", "{name: vllm, state: started, daemon-reload: true}"),
    "ansible.builtin.systemd_service": ("systemd_service", "{unit: vllm, enabled: true, scope: user}"),
    "ansible.builtin.service": ("service", "{name: docker, state: restarted, enabled: true}"),
}


@pytest.mark.parametrize("fqcn", sorted(FQCNS))
def test_the_collection_name_is_the_module(fqcn):
    assert registry.canonical(fqcn) == FQCNS[fqcn][0]


@pytest.mark.parametrize("name", ["ansible.posix.firewalld", "community.general.ufw", "ansible.builtin.modprobe"])
def test_modules_rigger_lacks_stay_refused_by_name(rigger, tmp_path, name):
    assert registry.canonical(name) == name
    book = tmp_path / "play.yml"
    book.write_text(f"- hosts: localhost\n  tasks:\n    - {name}: {{name: x}}\n")
    run = rigger("validate", str(book))
    assert run.rc == 4 and f"module '{name}'" in run.stderr, run.stderr


def test_a_playbook_written_with_collection_names_validates(rigger, tmp_path):
    book = tmp_path / "play.yml"
    tasks = "".join(f"    - {fqcn}: {args}\n" for fqcn, (_, args) in sorted(FQCNS.items()))
    book.write_text(f"- hosts: localhost\n  gather_facts: false\n  tasks:\n{tasks}")
    run = rigger("validate", str(book))
    assert run.rc == 0, run.stdout + run.stderr

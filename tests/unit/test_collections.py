"""Roles and playbooks from installed collections (issue 20).

Real: the rigger CLI's validate on real files laid out as ansible-galaxy installs
collections, in a temporary folder; HOME points at an empty folder so no collection of this
machine answers. What ansible-core 2.19 runs is compared in
tests/differential/cases/collections-roles-playbooks; these are the refusals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def _collection_role(root: Path, fqcn: str) -> None:
    namespace, name, role = fqcn.split(".")
    tasks = root / "collections/ansible_collections" / namespace / name / "roles" / role / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text("- name: inside\n  debug: {msg: hi}\n")


def test_a_missing_collection_and_a_missing_role_in_one_are_told_apart(tmp_path: Path, rigger: Any) -> None:
    _collection_role(tmp_path, "nvidia.gpu.driver")
    book = tmp_path / "site.yml"
    env = {"HOME": str(tmp_path), "ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "none")}
    book.write_text("- hosts: localhost\n  roles: [nvidia.gpu.driver]\n")
    assert rigger("validate", str(book), env=env).rc == 0
    book.write_text("- hosts: localhost\n  roles:\n    - acme.hpc.slurm\n")
    missing = rigger("validate", str(book), env=env)
    assert missing.rc == 4 and f"{book}:3: role 'acme.hpc.slurm': the collection acme.hpc is not installed" in (
        missing.stderr
    )
    book.write_text("- hosts: localhost\n  roles:\n    - nvidia.gpu.fabric\n")
    no_role = rigger("validate", str(book), env=env)
    assert no_role.rc == 4 and "the collection nvidia.gpu has no role 'fabric'" in no_role.stderr


def test_a_collection_s_module_is_refused_by_name_with_its_collection(tmp_path: Path, rigger: Any) -> None:
    book = tmp_path / "site.yml"
    book.write_text("- hosts: localhost\n  tasks:\n    - name: dcgm\n      nvidia.gpu.dcgm_diag: {level: 1}\n")
    run = rigger("validate", str(book), env={"HOME": str(tmp_path)})
    assert run.rc == 4
    assert f"{book}:4: module 'nvidia.gpu.dcgm_diag' (from nvidia.gpu) is not available in rigger" in run.stderr


def test_import_playbook_of_a_collection_that_is_not_installed(tmp_path: Path, rigger: Any) -> None:
    book = tmp_path / "site.yml"
    book.write_text("- import_playbook: acme.hpc.site\n")
    run = rigger("validate", str(book), env={"HOME": str(tmp_path), "ANSIBLE_COLLECTIONS_PATH": str(tmp_path)})
    assert run.rc == 4 and f"{book}:1: import_playbook: the collection acme.hpc is not installed" in run.stderr


def test_a_short_module_name_under_collections_names_them(tmp_path: Path, rigger: Any) -> None:
    """With `collections: [nvidia.gpu]`, `dcgm_diag:` is that collection's module in Ansible:
    the refusal says rigger does not run collections' modules, not 'did you mean'."""
    book = tmp_path / "site.yml"
    book.write_text("- hosts: localhost\n  collections: [nvidia.gpu]\n  tasks:\n    - dcgm_diag: {level: 1}\n")
    run = rigger("validate", str(book), env={"HOME": str(tmp_path)})
    assert run.rc == 4 and "did you mean" not in run.stderr
    assert f"{book}:4: module 'dcgm_diag' is not available in rigger" in run.stderr and "nvidia.gpu" in run.stderr


@pytest.mark.parametrize(
    ("action", "named"),
    [
        ("rpm_key", "module 'rpm_key' is an Ansible module not available in rigger"),
        ("yum_repository", "module 'yum_repository' is an Ansible module not available in rigger"),
        ("wait_for_connection", "module 'wait_for_connection' is an Ansible module not available in rigger"),
        ("ufw", "module 'ufw' is an Ansible module not available in rigger (Ansible routes it to"),
    ],
)
def test_an_ansible_module_rigger_lacks_is_named_never_a_did_you_mean(
    tmp_path: Path, rigger: Any, action: str, named: str
) -> None:
    """A module ansible-core 2.19 ships (or routes a bare name of to a collection) is named
    as one rigger lacks; "did you mean 'apt_key'" would send the user to another module."""
    book = tmp_path / "site.yml"
    book.write_text(f"- hosts: localhost\n  tasks:\n    - {action}: {{}}\n")
    run = rigger("validate", str(book), env={"HOME": str(tmp_path)})
    assert run.rc == 4 and f"{book}:3: {named}" in run.stderr and "did you mean" not in run.stderr


def test_a_name_ansible_does_not_know_still_gets_did_you_mean(tmp_path: Path, rigger: Any) -> None:
    book = tmp_path / "site.yml"
    book.write_text("- hosts: localhost\n  tasks:\n    - lineinfle: {path: /x, line: y}\n")
    run = rigger("validate", str(book), env={"HOME": str(tmp_path)})
    assert run.rc == 4 and "unknown module or task keyword 'lineinfle' (did you mean 'lineinfile'?)" in run.stderr

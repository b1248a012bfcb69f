"""ansible.cfg and the ANSIBLE_* environment (issue 20).

Real: engine.config reading real files in a temporary folder, and the real CLI (validate,
run on the local connection, --list-hosts) in that folder. Nothing is mocked; HOME points at
an empty folder so the machine's own ~/.ansible.cfg cannot answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine import config
from engine.errors import ValidationError


def _env(home: Path, **extra: str) -> dict[str, str]:
    return {"HOME": str(home), **extra}


def test_ansible_config_then_the_current_folder_then_home(tmp_path: Path) -> None:
    home, project, named = tmp_path / "home", tmp_path / "project", tmp_path / "named.cfg"
    home.mkdir()
    project.mkdir()
    (home / ".ansible.cfg").write_text("[defaults]\nforks = 3\n")
    assert config.load(_env(home), project).get("forks") == 3
    (project / "ansible.cfg").write_text("[defaults]\nforks = 7\n")
    assert config.load(_env(home), project).get("forks") == 7
    named.write_text("[defaults]\nforks = 11\n")
    assert config.load(_env(home, ANSIBLE_CONFIG=str(named)), project).get("forks") == 11
    # a missing $ANSIBLE_CONFIG falls through to ./ansible.cfg, as in Ansible
    assert config.load(_env(home, ANSIBLE_CONFIG=str(tmp_path / "nope.cfg")), project).get("forks") == 7


def test_the_environment_wins_and_paths_start_at_the_file(tmp_path: Path) -> None:
    (tmp_path / "ansible.cfg").write_text(
        "[defaults]\nroles_path = ./galaxy-roles:roles ; a comment\ninventory = ./config/inventory\nforks=25\n"
        "[privilege_escalation]\nbecome = True\n"
    )
    elsewhere = tmp_path / "sub"
    elsewhere.mkdir()
    cfg = config.load(_env(tmp_path, ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg")), elsewhere)
    assert cfg.roles_path == (tmp_path / "galaxy-roles", tmp_path / "roles")
    assert cfg.get("inventory") == [str(tmp_path / "config/inventory")]
    assert cfg.get("become") is True
    env = _env(tmp_path, ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"), ANSIBLE_FORKS="4", ANSIBLE_ROLES_PATH="r1")
    cfg = config.load(env, elsewhere)
    assert cfg.get("forks") == 4 and cfg.roles_path == (elsewhere / "r1",)


def test_settings_rigger_does_not_read_are_named_once(tmp_path: Path) -> None:
    (tmp_path / "ansible.cfg").write_text(
        "[defaults]\nforks = 5\nstdout_callback = yaml\n\n[ssh_connection]\npipelining = True\n"
    )
    warnings = config.load(_env(tmp_path), tmp_path).warnings()
    assert len(warnings) == 1
    assert "[defaults] stdout_callback (line 3)" in warnings[0]
    assert "[ssh_connection] pipelining (line 6)" in warnings[0]
    assert "forks" not in warnings[0]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[privilege_escalation]\nbecome_method = su\n", "become_method = su is not supported"),
        ("[defaults]\nforks = many\n", "forks must be a number"),
        ("[defaults]\ntransport = docker\n", "transport = docker is not supported"),
    ],
)
def test_a_value_rigger_cannot_honour_names_file_and_line(tmp_path: Path, line: str, expected: str) -> None:
    (tmp_path / "ansible.cfg").write_text("# project settings\n" + line)
    with pytest.raises(ValidationError) as raised:
        config.load(_env(tmp_path), tmp_path)
    assert raised.value.file == str(tmp_path / "ansible.cfg") and raised.value.line == 3
    assert expected in raised.value.message


def test_a_world_writable_folder_s_ansible_cfg_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "ansible.cfg").write_text("[defaults]\nforks = 9\n")
    tmp_path.chmod(0o777)
    try:
        cfg = config.load(_env(tmp_path / "nohome"), tmp_path)
    finally:
        tmp_path.chmod(0o755)
    assert cfg.get("forks") is None and "world-writable" in cfg.warnings()[0]


def test_the_command_line_wins_over_the_file(tmp_path: Path) -> None:
    (tmp_path / "ansible.cfg").write_text("[defaults]\nremote_user = cfg\nhost_key_checking = False\ntimeout = 60\n")
    cfg = config.load(_env(tmp_path), tmp_path)
    found = config.connection_defaults(cfg, {"ansible_user": "cli", "ansible_become": None})
    assert found == {"ansible_user": "cli", "host_key_checking": "off", "ssh_connect_timeout_s": 60.0}


def _project(root: Path) -> Path:
    """A project run from its root: roles under roles_path, the inventory named by ansible.cfg."""
    (root / "deps/web/tasks").mkdir(parents=True)
    (root / "deps/web/tasks/main.yml").write_text("- name: from roles_path\n  debug: {msg: '{{ ansible_forks }}'}\n")
    (root / "config").mkdir()
    (root / "config/inventory").write_text("[gpu]\nnode1 ansible_connection=local\nnode2 ansible_connection=local\n")
    (root / "ansible.cfg").write_text(
        "[defaults]\nroles_path = ./deps\ninventory = ./config/inventory\nforks = 3\ngathering = smart\n"
    )
    book = root / "site.yml"
    book.write_text("- hosts: gpu\n  gather_facts: false\n  roles: [web]\n")
    return book


def test_a_project_run_from_its_root_reads_its_ansible_cfg(tmp_path: Path, rigger: Any) -> None:
    book = _project(tmp_path)
    env = {"HOME": str(tmp_path), "ANSIBLE_CONFIG": ""}
    valid = rigger("validate", book.name, cwd=tmp_path, env=env)
    assert valid.rc == 0, valid.stderr
    assert "2 hosts in inventory" in valid.stdout and "[defaults] gathering (line 5)" in valid.stderr
    run = rigger("run", book.name, "--output", "jsonl", "-e", "rigger_run_lock=false", cwd=tmp_path, env=env)
    assert run.rc == 0, run.stdout + run.stderr
    assert [(r["host"], r["data"]["msg"]) for r in run.results()] == [("node1", 3), ("node2", 3)]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    lost = rigger("validate", str(book), cwd=elsewhere, env=env)
    assert lost.rc == 4 and "the role 'web' was not found" in lost.stderr


def test_list_hosts_in_ansible_playbook_s_shape(tmp_path: Path, rigger: Any) -> None:
    book = _project(tmp_path)
    shown = rigger("run", book.name, "--list-hosts", cwd=tmp_path, env={"HOME": str(tmp_path)})
    assert shown.rc == 0
    assert shown.stdout == (
        "\nplaybook: site.yml\n\n  play #1 (gpu): gpu\tTAGS: []\n    pattern: ['gpu']\n"
        "    hosts (2):\n      node1\n      node2\n"
    )

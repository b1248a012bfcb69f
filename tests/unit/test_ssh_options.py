"""Parsing SSH host variables and building the remote command line (pure functions;
the command lines are executed by a real /bin/sh here to check the quoting)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess

import pytest

from engine.connection.ssh.command import BecomeMarkers, command_line
from engine.connection.ssh.options import (
    Endpoint,
    jump_from_common_args,
    options_from_host_vars,
    parse_endpoint,
)
from engine.errors import TaskFailed, ValidationError


def test_defaults_follow_ansible() -> None:
    options = options_from_host_vars("gpu1", {})
    assert options.target == Endpoint("gpu1", 22, None)
    assert options.python == "python3"
    assert options.host_key_checking == "strict"
    assert options.jump is None


def test_inventory_vars_are_read() -> None:
    options = options_from_host_vars(
        "gpu1",
        {
            "ansible_host": "10.0.0.5",
            "ansible_port": "2222",
            "ansible_user": "ops",
            "ansible_ssh_private_key_file": "~/keys/id",
            "ansible_python_interpreter": "/usr/bin/python3.11",
            "known_hosts_file": "/etc/fleet/known_hosts",
            "host_key_checking": "accept-new",
            "ansible_become_password": "pw",
            "ssh_connect_timeout_s": 3,
            "ssh_keepalive_s": 7,
        },
    )
    assert options.target == Endpoint("10.0.0.5", 2222, "ops")
    assert options.target.known_hosts_name == "[10.0.0.5]:2222"
    assert options.key_file and options.key_file.endswith("/keys/id")
    assert options.known_hosts_files[-1] == "/etc/fleet/known_hosts"
    assert options.record_known_hosts_file == "/etc/fleet/known_hosts"
    assert (options.connect_timeout_s, options.keepalive_s) == (3.0, 7.0)
    assert "pw" not in repr(options), "the become password must not show in repr"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ("-J admin@bastion", "admin@bastion"),
        ("-Jadmin@bastion:2200", "admin@bastion:2200"),
        ("-o StrictHostKeyChecking=no -o ProxyJump=jump.example:22", "jump.example:22"),
        ("-o 'ProxyJump ops@b1'", "ops@b1"),
        ("-o ProxyJump=none", None),
        ("-o ControlMaster=auto", None),
    ],
)
def test_jump_host_from_common_args(args: str, expected: str | None) -> None:
    assert jump_from_common_args(args) == expected


def test_endpoint_forms() -> None:
    assert parse_endpoint("ops@b:2200") == Endpoint("b", 2200, "ops")
    assert parse_endpoint("ssh://b", default_user="me") == Endpoint("b", 22, "me")
    assert parse_endpoint("[fe80::1]:2222") == Endpoint("fe80::1", 2222, None)
    assert parse_endpoint("fe80::1") == Endpoint("fe80::1", 22, None)
    with pytest.raises(ValidationError, match="invalid port"):
        parse_endpoint("b:http")


def test_jump_user_defaults_to_the_target_user() -> None:
    options = options_from_host_vars("gpu1", {"ansible_user": "ops", "ssh_jump": "bastion"})
    assert options.jump == Endpoint("bastion", 22, "ops")


@pytest.mark.parametrize(
    "bad",
    [{"host_key_checking": "maybe"}, {"ansible_port": 70000}, {"ssh_connect_timeout_s": "soon"}],
)
def test_bad_vars_are_validation_errors(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        options_from_host_vars("gpu1", bad)


def test_chained_jumps_are_refused_clearly() -> None:
    with pytest.raises(ValidationError, match="chained jump hosts"):
        options_from_host_vars("gpu1", {"ssh_jump": "a,b"})


def _sh(line: str) -> str:
    return subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True).stdout


def test_command_line_quotes_once_and_sh_gets_the_exact_argv() -> None:
    argv = ["printf", "[%s]", "a b", "$HOME", "it's", "`x`", "*", ""]
    assert _sh(command_line(argv)) == "[a b][$HOME][it's][`x`][*][]"


def test_command_line_env_and_cwd() -> None:
    line = command_line(["sh", "-c", 'echo "$V" "$PWD"'], env={"V": "x 'y'"}, cwd="/tmp")
    assert _sh(line) == "x 'y' /tmp\n"


def test_become_line_keeps_env_values_out_of_sudo_argv() -> None:
    markers = BecomeMarkers.new()
    line = command_line(["env"], env={"TOKEN": "secret"}, become=markers)
    sudo_part = line.split("exec ", 1)[1]
    assert "secret" not in sudo_part and "--preserve-env=TOKEN" in sudo_part
    assert "sudo -n" in sudo_part


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("sudo"), reason="needs root and sudo")
def test_become_user_line_runs_as_that_user_through_real_sudo() -> None:
    """The line sshd would run, run here by sh with the real sudo (as root, sudo -u needs
    no password): the success marker, then the command as nobody with nobody's HOME."""
    markers = BecomeMarkers.new()
    line = command_line(
        ["sh", "-c", 'echo "$(id -un) $HOME $V"'], env={"V": "kept"}, become=markers, become_user="nobody"
    )
    home = pwd.getpwnam("nobody").pw_dir
    assert _sh(line) == f"{markers.success}\nnobody {home} kept\n"
    assert "sudo -H -u nobody -n" in line


def test_invalid_env_names_are_refused() -> None:
    with pytest.raises(TaskFailed, match="invalid environment variable"):
        command_line(["true"], env={"A B": "x"})


def test_the_old_ansible_ssh_names_are_aliases_and_the_new_names_win() -> None:
    """Issue 20: over SSH rigger connects to ansible_ssh_host, not the inventory name."""
    old = options_from_host_vars(
        "gpu01",
        {
            "ansible_ssh_host": "10.0.2.1",
            "ansible_ssh_user": "ubuntu",
            "ansible_ssh_port": 2222,
            "ansible_ssh_pass": "pw",
        },
    )
    assert old.target == Endpoint("10.0.2.1", 2222, "ubuntu") and old.password == "pw"
    assert "pw" not in repr(old)
    both = options_from_host_vars("gpu01", {"ansible_ssh_host": "10.0.2.1", "ansible_host": "10.0.9.9"})
    assert both.target.host == "10.0.9.9"

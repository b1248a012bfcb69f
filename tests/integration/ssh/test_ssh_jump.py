"""A fleet behind a bastion: the target is reached through a second sshd (ProxyJump).

Real: two sshd processes; the bastion's log (LogLevel DEBUG1) proves the tunnel went
through it, and a bastion with forwarding disabled proves the jump is not bypassed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sshlab
from sshlab import Lab

from engine.connection.ssh.connection import SSHConnection
from engine.errors import HostUnreachable

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bastions(tmp_path_factory: pytest.TempPathFactory, lab: Lab) -> Iterator[dict[str, sshlab.Sshd]]:
    work = tmp_path_factory.mktemp("bastion")
    work.chmod(0o755)
    servers = {
        "open": sshlab.start_sshd(work, "bastion", ["127.0.0.11"], extra_config=["LogLevel DEBUG1"]),
        "closed": sshlab.start_sshd(work, "noforward", ["127.0.0.12"], extra_config=["AllowTcpForwarding no"]),
    }
    with lab.known_hosts.open("a") as handle:
        for server in servers.values():
            handle.write(server.known_hosts_lines())
    try:
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def _through(lab: Lab, **jump: object) -> SSHConnection:
    return SSHConnection.from_host_vars("behind1", lab.vars(address="127.0.0.3", **jump))


@pytest.mark.parametrize("style", ["common_args_J", "common_args_o", "ssh_jump"])
def test_target_is_reached_through_the_bastion(lab: Lab, bastions: dict[str, sshlab.Sshd], style: str) -> None:
    bastion = bastions["open"]
    spec = f"{sshlab.USER_NOSUDO}@{bastion.address}:{bastion.port}"
    jump = {
        "common_args_J": {"ansible_ssh_common_args": f"-J {spec}"},
        "common_args_o": {"ansible_ssh_common_args": f"-o ProxyJump={spec} -o Foo=bar"},
        "ssh_jump": {"ssh_jump": spec},
    }[style]
    connection = _through(lab, **jump)
    try:
        assert connection.run(["id", "-un"]).stdout == "rigger-ssh\n"
        assert connection.read_file("/etc/hostname") == Path("/etc/hostname").read_bytes()
    finally:
        connection.close()
    log = bastion.log_file.read_text()
    assert f"to 127.0.0.3 port {lab.sshd.port}" in log, log[-2000:]


def test_bastion_refusing_to_forward_makes_the_target_unreachable(lab: Lab, bastions: dict[str, sshlab.Sshd]) -> None:
    closed = bastions["closed"]
    connection = _through(lab, ssh_jump=f"{sshlab.USER_NOSUDO}@{closed.address}:{closed.port}")
    expected = r"behind1: jump host .* could not reach 127\.0\.0\.3"
    with pytest.raises(HostUnreachable, match=expected):
        connection.run(["true"])


def test_unknown_bastion_key_is_refused(lab: Lab, tmp_path: Path) -> None:
    bastion = sshlab.start_sshd(tmp_path, "stranger-bastion", ["127.0.0.13"])
    try:
        connection = _through(lab, ssh_jump=f"{bastion.address}:{bastion.port}")
        with pytest.raises(HostUnreachable, match=r"unknown host key for \[127\.0\.0\.13\]"):
            connection.run(["true"])
    finally:
        bastion.stop()

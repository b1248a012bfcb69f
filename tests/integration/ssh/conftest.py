"""Fixtures for the SSH tests: real Debian OpenSSH sshd servers on 127.0.0.x and test users.

One lab per test session: three users (NOPASSWD sudo, no sudo, password sudo) sharing one
generated client key, one sshd answering on 127.0.0.2-127.0.0.5 (four "hosts"), and a
known_hosts file holding its host key. Tests that break a server start their own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sshlab
from sshlab import Lab

from engine.connection.ssh.connection import SSHConnection

FLEET_ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with sshlab.running_lab(tmp_path_factory.mktemp("sshlab"), "fleet", FLEET_ADDRESSES) as lab:
        yield lab


@pytest.fixture(params=["remote", "exec-channels"])
def conn(lab: Lab, request: pytest.FixtureRequest) -> Iterator[SSHConnection]:
    """A connection through the persistent remote python, and one without it."""
    connection = lab.connect(ssh_remote_python=request.param == "remote")
    try:
        yield connection
    finally:
        connection.close()

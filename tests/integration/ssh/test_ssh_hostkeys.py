"""Host key checking against real sshd host keys.

Real: sshd and its generated ed25519 host key; fingerprints are checked against
``ssh-keygen -l`` (an independent implementation). Known-hosts files are temp files.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import sshlab
from sshlab import Lab

from engine.connection.ssh.connection import SSHConnection
from engine.connection.ssh.hostkeys import HostKeyError
from engine.errors import HostUnreachable

pytestmark = pytest.mark.slow


def _connect(lab: Lab, known: Path, **extra: object) -> SSHConnection:
    return SSHConnection.from_host_vars("gpu1", sshlab.host_vars(lab.sshd, lab.client_key, known, **extra))


def _other_key_line(lab: Lab, tmp_path: Path) -> tuple[str, str]:
    other = sshlab.keygen(tmp_path / "impostor")
    kind, blob = Path(f"{other}.pub").read_text().split()[:2]
    line = f"[{lab.sshd.address}]:{lab.sshd.port} {kind} {blob}\n"
    return line, sshlab.fingerprint(Path(f"{other}.pub"))


def test_unknown_host_is_refused_naming_host_and_fingerprint(lab: Lab, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    connection = _connect(lab, known)
    with pytest.raises(HostKeyError) as caught:
        connection.run(["true"])
    message = str(caught.value)
    assert "gpu1" in message and "unknown host key" in message
    assert lab.sshd.fingerprint() in message
    assert f"[{lab.sshd.address}]:{lab.sshd.port}" in message
    assert isinstance(caught.value, HostUnreachable)
    assert not known.exists()


def test_accept_new_records_once_then_strict_accepts(lab: Lab, tmp_path: Path) -> None:
    known = tmp_path / "ssh" / "known_hosts"
    first = _connect(lab, known, host_key_checking="accept-new")
    assert first.run(["echo", "hi"]).stdout == "hi\n"
    warnings = first.drain_warnings()
    assert any("recorded" in w and lab.sshd.fingerprint() in w for w in warnings)
    first.close()
    assert known.read_text() == lab.sshd.known_hosts_lines().splitlines(keepends=True)[0]
    again = _connect(lab, known)
    assert again.run(["echo", "hi"]).stdout == "hi\n"
    assert again.drain_warnings() == []
    again.close()


def test_accept_new_from_many_threads_records_one_line(lab: Lab, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    errors: list[BaseException] = []

    def connect() -> None:
        connection = _connect(lab, known, host_key_checking="accept-new")
        try:
            connection.run(["true"])
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=connect) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(known.read_text().splitlines()) == 1


@pytest.mark.parametrize("policy", ["strict", "accept-new", "off"])
def test_changed_key_is_refused_with_both_fingerprints(lab: Lab, tmp_path: Path, policy: str) -> None:
    known = tmp_path / "known_hosts"
    line, old_fingerprint = _other_key_line(lab, tmp_path)
    known.write_text(line)
    connection = _connect(lab, known, host_key_checking=policy)
    with pytest.raises(HostKeyError) as caught:
        connection.run(["true"])
    message = str(caught.value)
    assert "HOST KEY CHANGED" in message
    assert old_fingerprint in message and lab.sshd.fingerprint() in message
    assert known.read_text() == line, "the recorded key must not be replaced"


def test_off_connects_loudly_and_records_nothing(lab: Lab, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    connection = _connect(lab, known, host_key_checking="off")
    assert connection.run(["echo", "hi"]).stdout == "hi\n"
    warnings = connection.drain_warnings()
    connection.close()
    assert any("host key checking is OFF" in w for w in warnings)
    assert not known.exists()


def test_server_offering_only_weak_ciphers_is_refused(lab: Lab, tmp_path: Path) -> None:
    weak = sshlab.start_sshd(tmp_path, "weak", ["127.0.0.9"], extra_config=["Ciphers aes128-cbc,3des-cbc"])
    try:
        known = tmp_path / "known_hosts"
        known.write_text(weak.known_hosts_lines())
        connection = SSHConnection.from_host_vars("weak1", sshlab.host_vars(weak, lab.client_key, known))
        with pytest.raises(HostUnreachable, match=r"weak1: .*handshake failed"):
            connection.run(["true"])
    finally:
        weak.stop()


def test_negotiated_algorithms_are_strong(conn: SSHConnection) -> None:
    conn.run(["true"])
    transport = conn.transport()
    assert "cbc" not in transport.remote_cipher and "cbc" not in transport.local_cipher
    assert transport.remote_mac not in ("hmac-sha1", "hmac-md5")

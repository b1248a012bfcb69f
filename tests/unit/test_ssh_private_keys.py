"""Private key files as OpenSSH judges them: real keys made by ssh-keygen, no server.

Real: ssh-keygen, paramiko, file modes. The end-to-end refusals (exit 3 from `rigger
run` against a real sshd) are in tests/integration/ssh/test_ssh_bad_credentials.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import paramiko
import pytest

from engine.connection.ssh.transport import UnprotectedKey, load_private_key


def keygen(path: Path, kind: str = "ed25519", passphrase: str = "") -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", passphrase, "-f", str(path)], check=True)
    return path


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660])
def test_a_key_group_or_others_may_read_is_refused(tmp_path: Path, mode: int) -> None:
    key = keygen(tmp_path / "id")
    key.chmod(mode)
    with pytest.raises(UnprotectedKey, match=f"permissions {mode:04o} are too open"):
        load_private_key(str(key))


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_private_key_loads(tmp_path: Path, mode: int) -> None:
    key = keygen(tmp_path / "id")
    key.chmod(mode)
    assert load_private_key(str(key)).get_name() == "ssh-ed25519"


@pytest.mark.parametrize("kind", ["ed25519", "rsa", "ecdsa"])
def test_a_passphrase_protected_key_says_it_needs_one(tmp_path: Path, kind: str) -> None:
    key = keygen(tmp_path / "id", kind, passphrase="a passphrase")
    with pytest.raises(paramiko.PasswordRequiredException):
        load_private_key(str(key))

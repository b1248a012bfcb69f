"""Bad SSH credentials and known_hosts files: clear, closed failures, never a crash.

Real: sshd on loopback (sshlab), paramiko, ssh-keygen keys, `rigger run` in a subprocess
(exit codes as a user sees them). Nothing is faked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sshlab
from sshlab import Lab

from engine.errors import HostUnreachable

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = "- hosts: gpu1\n  gather_facts: false\n  tasks:\n    - command: 'true'\n"


def rigger_run(work: Path, host: dict[str, object]) -> subprocess.CompletedProcess[str]:
    (work / "inventory.json").write_text(json.dumps({"all": {"hosts": {"gpu1": host}}}))
    (work / "play.yml").write_text(PLAYBOOK)
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", "run", str(work / "play.yml"), "-i", str(work / "inventory.json")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_a_corrupt_known_hosts_line_names_file_and_line_and_fails_closed(lab: Lab, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("# fleet\n" + lab.known_hosts.read_text() + "gpu9 ssh-ed25519 AAAA!!!not-base64\n")
    line = len(known.read_text().splitlines())
    with pytest.raises(HostUnreachable, match=rf"gpu1: {known}:{line}: corrupt known_hosts line"):
        lab.connect(known_hosts_file=str(known)).run(["true"])
    done = rigger_run(tmp_path, lab.vars(known_hosts_file=str(known)))
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"{known}:{line}: corrupt known_hosts line" in done.stdout + done.stderr
    assert "a bug in rigger" not in done.stderr


def test_a_known_hosts_line_with_too_few_fields_fails_closed(lab: Lab, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(lab.known_hosts.read_text() + "gpu9 ssh-ed25519\n")
    with pytest.raises(HostUnreachable, match=r"known_hosts:\d+: corrupt known_hosts line \(expected"):
        lab.connect(known_hosts_file=str(known)).run(["true"])


@pytest.mark.parametrize("kind", ["ed25519", "rsa"])
def test_a_passphrase_protected_key_without_a_passphrase_says_so(lab: Lab, tmp_path: Path, kind: str) -> None:
    key = tmp_path / f"locked_{kind}"
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "a passphrase", "-f", str(key)], check=True)
    done = rigger_run(tmp_path, lab.vars(ansible_ssh_private_key_file=str(key)))
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"key file {key} (protected by a passphrase and none was given" in done.stdout + done.stderr
    assert "a bug in rigger" not in done.stderr


def test_a_private_key_others_may_read_is_refused_as_openssh_refuses_it(lab: Lab, tmp_path: Path) -> None:
    """The key itself is authorized: only its mode stands in the way, as with ssh -i."""
    key = tmp_path / "open_key"
    shutil.copy(lab.client_key, key)
    key.chmod(0o644)
    with pytest.raises(HostUnreachable) as caught:
        lab.connect(ansible_ssh_private_key_file=str(key)).run(["true"])
    assert "UNPROTECTED PRIVATE KEY FILE: permissions 0644 are too open" in str(caught.value)
    assert f"chmod 600 {key}" in str(caught.value)
    key.chmod(0o600)
    assert lab.connect(ansible_ssh_private_key_file=str(key)).run(["echo", "ok"]).stdout == "ok\n"


def test_keygen_helper_keys_stay_private(tmp_path: Path) -> None:
    """The lab's own keys are written 0600, so the rule above never refuses them."""
    key = sshlab.keygen(tmp_path / "k")
    assert key.stat().st_mode & 0o077 == 0

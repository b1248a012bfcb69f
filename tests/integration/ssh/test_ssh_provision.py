"""playbooks/provision_gpu_host.yml over real SSH with become: bare host, check, run, run again.

Real: the rigger CLI in a subprocess, paramiko, Debian's sshd on 127.0.0.2, sudo (the
lab's NOPASSWD user becomes root), useradd, apt/dpkg (packages already installed, so
nothing is installed on this shared machine), the vLLM CPU build the serving tests use
(.venv-vllm, planned against, never reinstalled). The "host" is this machine; everything
the playbook creates lives under a temporary directory, and the service user is deleted
afterwards only if this test created it.
"""

from __future__ import annotations

import grp
import json
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sshlab
from sshlab import Lab

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]
SERVICE_USER = "rigger-prov-svc"


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@pytest.fixture
def bare_host(lab: Lab) -> Iterator[tuple[Path, Path, str]]:
    if _user_exists(SERVICE_USER):
        pytest.fail(f"user {SERVICE_USER} exists before the test: not ours to delete, remove it by hand")
    parent = Path(tempfile.mkdtemp(prefix="rigger-provision-", dir="/tmp"))
    parent.chmod(0o755)
    inventory = parent / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    gpu1:\n"
        + "".join(f"      {key}: {json.dumps(value)}\n" for key, value in lab.vars(address="127.0.0.2").items())
    )
    extra = {
        "provision_packages": ["ca-certificates", "python3"],
        "provision_user": SERVICE_USER,
        "provision_base_dir": f"{parent}/inference",
        "provision_model_dir": f"{parent}/models",
        "provision_vllm_venv": str(REPO / ".venv-vllm"),
        "provision_vllm_variant": "cpu",
        "provision_limits_file": f"{parent}/limits.conf",
    }
    try:
        yield parent, inventory, json.dumps(extra)
    finally:
        if _user_exists(SERVICE_USER):
            subprocess.run(["userdel", SERVICE_USER], check=True)
        shutil.rmtree(parent, ignore_errors=True)


def test_provision_bare_host_check_then_twice(rigger, digest, bare_host) -> None:  # type: ignore[no-untyped-def]
    parent, inventory, extra = bare_host
    book = str(REPO / "playbooks" / "provision_gpu_host.yml")
    args = ("run", book, "-i", str(inventory), "-e", extra, "--output", "jsonl")
    before = digest(parent)

    check = rigger(*args, "--check", "--diff")
    assert check.rc == 0, check.stdout[-3000:] + check.stderr[-3000:]
    # the recap counts a looped task once, as Ansible does: count the changed results
    assert len([r for r in check.results() if r["status"] == "changed"]) >= 5
    assert digest(parent) == before and not _user_exists(SERVICE_USER)

    first = rigger(*args)
    assert first.rc == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert len([r for r in first.results() if r["status"] == "changed"]) >= 5
    base = parent / "inference"
    env_file = base / "etc" / "vllm.env"
    assert f"VLLM_MODEL_DIR={parent}/models\n" in env_file.read_text()
    st = env_file.stat()
    assert (st.st_uid, grp.getgrgid(st.st_gid).gr_name, st.st_mode & 0o777) == (0, SERVICE_USER, 0o640)
    assert pwd.getpwuid((parent / "models").stat().st_uid).pw_name == SERVICE_USER
    assert (base / "bin" / "vllm-healthcheck").stat().st_mode & 0o777 == 0o755
    assert (parent / "limits.conf").read_text() == f"{SERVICE_USER} - nofile 1048576\n"
    vllm = first.results("The pinned vLLM in its venv")[0]
    assert vllm["status"] == "ok" and vllm["data"]["vllm_version"] == "0.32.0"

    second = rigger(*args)
    assert second.rc == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert second.recap["gpu1"]["changed"] == 0, [r for r in second.results() if r["status"] == "changed"]

    settled = digest(parent)
    again = rigger(*args, "--check", "--diff")
    assert again.rc == 0 and again.recap["gpu1"]["changed"] == 0
    assert digest(parent) == settled
    assert sshlab.USER_NOPASSWD  # the lab user ran it, become made it root

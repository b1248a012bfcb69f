"""scripts/ci/common.sh: apt steps wait for the apt/dpkg lock (bounded) instead of failing,
and long installs say how far they are instead of going quiet.

Real: bash sourcing common.sh, apt_lock_holder.py asking the kernel (F_GETLK) about a real
fcntl lock that this test holds, du, background processes. Not real: the lock file is a
scratch file named through APT_LOCK_FILES, not /var/lib/dpkg/lock-frontend (holding the
machine's dpkg lock would stall every other apt-get here), and apt-get itself is not run.
No timed assertion: each test waits for the line it expects, then acts.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMMON = REPO / "scripts" / "ci" / "common.sh"


def bash(script: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", "-c", f"set -euo pipefail; . {COMMON}; {script}"],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def read_until(proc: subprocess.Popen[str], marker: str) -> str:
    seen = ""
    assert proc.stdout is not None
    for line in proc.stdout:
        seen += line
        if marker in line:
            return seen
    raise AssertionError(f"{marker!r} never printed; output:\n{seen}")


@pytest.fixture
def held_lock(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A scratch lock file, write-locked with fcntl by this process (as apt-get locks)."""
    path = tmp_path / "lock-frontend"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
    fcntl.lockf(fd, fcntl.LOCK_EX)
    try:
        yield path, fd
    finally:
        os.close(fd)


def test_apt_waits_for_a_held_lock_naming_the_holder_then_goes_on(held_lock: tuple[Path, int]) -> None:
    path, fd = held_lock
    proc = bash("wait_for_apt_locks; echo lock-free", SUDO="", APT_LOCK_FILES=str(path), APT_LOCK_POLL_S="0.2")
    seen = read_until(proc, "waiting for")
    assert f"process {os.getpid()} " in seen and str(path) in seen and "at most 300s" in seen
    fcntl.lockf(fd, fcntl.LOCK_UN)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "lock-free" in rest, seen + rest


def test_apt_gives_up_after_the_bound_saying_what_to_do(held_lock: tuple[Path, int]) -> None:
    path, _ = held_lock
    proc = bash("wait_for_apt_locks; echo went-on", SUDO="", APT_LOCK_FILES=str(path), APT_LOCK_WAIT_S="0")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "went-on" not in out, out
    assert "gave up after 0s" in out and "APT_LOCK_WAIT_S" in out and "run this again" in out


def test_a_free_lock_is_not_waited_for(tmp_path: Path) -> None:
    (tmp_path / "lock").touch()
    proc = bash("wait_for_apt_locks; echo lock-free", SUDO="", APT_LOCK_FILES=str(tmp_path / "lock"))
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.strip() == "lock-free", out


def test_a_quiet_install_prints_progress_while_it_runs_and_keeps_its_exit_status(tmp_path: Path) -> None:
    go = tmp_path / "go"
    (tmp_path / "venv").mkdir()
    quiet = f"sh -c 'while [ ! -e {go} ]; do sleep 0.1; done; exit 7'"
    proc = bash(f"run_with_progress demo {tmp_path / 'venv'} 3500 {quiet}", PROGRESS_EVERY_S="1")
    seen = read_until(proc, "s so far;")
    assert re.search(rf"{tmp_path / 'venv'} is \d+ MB of about 3500 MB", seen), seen
    go.touch()
    proc.communicate(timeout=60)
    assert proc.returncode == 7


def test_no_setup_step_runs_apt_get_without_the_lock_wait() -> None:
    """Every apt-get goes through common.sh's apt_get (the one place that waits)."""
    for script in [*sorted((REPO / "scripts").rglob("*.sh"))]:
        for number, line in enumerate(script.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if "apt-get " in code and script != COMMON:
                pytest.fail(f"{script.relative_to(REPO)}:{number} runs apt-get directly: use apt_install")


def needed(*paths: str) -> list[str]:
    done = subprocess.run(["bash", "-c", f'. {COMMON}; needed_steps "$@"', "needed", *paths], cwd=REPO,
                          capture_output=True, text=True, check=True)  # fmt: skip
    return done.stdout.split()


def test_a_part_runs_only_the_set_up_its_tests_need() -> None:
    """`bash scripts/test.sh PATH` (issue 29): a unit path needs no sshd, vLLM, mirror or
    ansible-core; a directory above an area needs that area's step; the whole tree all."""
    assert needed("tests/unit") == ["gpu", "sudo"]
    assert needed("./tests/unit/test_yamlload.py") == ["gpu", "sudo"]
    assert needed("tests/integration/vllm/test_serve_ssh.py") == ["gpu", "sudo", "haproxy", "ssh", "vllm"]
    assert needed("tests/integration/hub/") == ["gpu", "sudo", "ssh", "vllm", "hub"]
    assert needed("tests/differential", "tests/modules/test_lb_backend.py") == ["gpu", "sudo", "haproxy", "ansible"]
    every = ["gpu", "sudo", "systemd", "apt", "browser", "haproxy", "ssh", "vllm", "hub", "ansible"]
    integration = [step for step in every if step not in ("systemd", "ansible")]
    assert needed("tests") == every and needed(".") == every and needed("tests/integration") == integration
    assert needed("tests/modules/test_systemd_service.py") == ["gpu", "sudo", "systemd"]


# A test file that uses one of these harnesses needs that set-up step (scripts/ci/needs.txt).
HARNESS_STEP = {
    r"^from sshlab import|^import sshlab": "ssh",
    r"vllmkit|rolloutkit|VLLM_PYTHON = ": "vllm",
    r"^from olah_mirror import|^import olah_mirror": "hub",
    r"^from haproxy_lab import": "haproxy",
    r"^from systemd_manager import": "systemd",
    r"playwright": "browser",
    r"^from harness import|^import harness": "ansible",
    r'\["gpg", ': "apt",
}


def test_every_file_using_a_harness_is_listed_for_its_set_up_step() -> None:
    """The table scripts/test.sh reads cannot fall behind the tests: a new file that starts
    sshd or vLLM without being listed would fail on a fresh machine when run alone."""
    missing = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        if path == Path(__file__).resolve():
            continue  # its own table names every harness
        rel = path.relative_to(REPO).as_posix()
        text = path.read_text()
        for pattern, step in HARNESS_STEP.items():
            if re.search(pattern, text, re.MULTILINE) and step not in needed(rel):
                missing.append(f"{rel} uses the {step} harness; list it under {step} in scripts/ci/needs.txt")
    assert not missing, "\n".join(missing)

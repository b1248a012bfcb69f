"""A real systemd user manager for tests (a test harness, not a fake).

PID 1 here (and in CI's containers) is not systemd, and systemd refuses to run a user
manager, and systemctl to talk to one server-side, unless /run/systemd/system exists
(sd_booted(3)). Making that directory on the machine would tell every other test and tool
that systemd runs here, so the manager runs in a mount namespace of its own
(`unshare --mount`, private propagation) where a tmpfs on /run/systemd holds it; commands
that drive it (`systemctl --user`, rigger) enter that namespace with `nsenter --mount`.
Everything else (files, processes, network) is this machine's.

Real: systemd 252's /lib/systemd/systemd --user (jobs, unit files, enable/mask symlinks,
daemon-reload), systemctl, util-linux unshare/nsenter (root). Its config and data
directories (units in $XDG_DATA_HOME/systemd/user) and HOME are the test's scratch folder;
its runtime directory is /run/user/UID on a tmpfs of the namespace, as after a login.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SYSTEMD = "/lib/systemd/systemd"
# In the new mount namespace only: systemd's "booted" mark, and /run/user/UID (where
# Ansible's systemd looks for a user manager when XDG_RUNTIME_DIR is unset), on tmpfs.
_BOOTED_HERE = (
    "mkdir -p /run/systemd /run/user && mount -t tmpfs tmpfs /run/systemd && mkdir /run/systemd/system"
    ' && mount -t tmpfs tmpfs /run/user && mkdir -m 700 "$XDG_RUNTIME_DIR" && exec "$0" --user'
)


@dataclass(frozen=True)
class UserManager:
    pid: int
    env: dict[str, str]  # XDG_RUNTIME_DIR and the other XDG dirs: what systemctl --user needs
    unit_dir: Path

    def inside(self, argv: list[str]) -> list[str]:
        """``argv`` as a command in the manager's mount namespace."""
        return ["nsenter", f"--target={self.pid}", "--mount", "--", *argv]

    def systemctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = self.inside(["systemctl", "--user", *args])
        return subprocess.run(argv, env={**os.environ, **self.env}, capture_output=True, text=True, timeout=30)

    def write_unit(self, name: str, body: str) -> Path:
        path = self.unit_dir / name
        path.write_text(body)
        return path

    def show(self, name: str, prop: str) -> str:
        return self.systemctl("show", "-p", prop, "--value", "--", name).stdout.strip()


@contextmanager
def user_manager(root: Path) -> Iterator[UserManager]:
    """A running user manager whose state lives under ``root``; stopped (with its units) after."""
    runtime, config, data = f"/run/user/{os.geteuid()}", root / "config", root / "data"  # runtime: on the tmpfs
    # Unit files where a package puts them (the data dir, as /lib/systemd/system): enable
    # and mask write their links to the config dir above it (as /etc/systemd/system).
    unit_dir = data / "systemd" / "user"
    unit_dir.mkdir(parents=True, exist_ok=True)  # a second manager on the same root: a reboot
    env = {
        "XDG_RUNTIME_DIR": runtime,
        "XDG_CONFIG_HOME": str(config),
        "XDG_DATA_HOME": str(data),
        "HOME": str(root),
    }
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _BOOTED_HERE, SYSTEMD]
    process = subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    manager = UserManager(process.pid, env, unit_dir)
    try:
        _wait_running(manager, process)
        yield manager
    finally:
        _stop(process)


def _wait_running(manager: UserManager, process: subprocess.Popen[bytes], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"systemd --user exited ({process.returncode}): {process.stderr.read().decode()}")  # type: ignore[union-attr]
        if manager.systemctl("is-system-running").stdout.strip() in ("running", "degraded"):
            return
        time.sleep(0.05)
    raise RuntimeError(f"systemd --user did not come up within {timeout_s} s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM: a user manager starts exit.target, stops its units and exits."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()

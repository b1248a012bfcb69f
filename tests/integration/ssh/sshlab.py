"""Real OpenSSH sshd servers and test users for the SSH tests and the SSH benchmark.

Everything here is real: Debian's /usr/sbin/sshd, ssh-keygen, useradd, sudo. Users get
/bin/sh as their shell so no rc file runs per command (root's ~/.bashrc runs pyenv init,
80-200 ms a command). Needs root (to create users and run sshd); a missing sshd or a
non-root run is a clear failure, never a skip.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.connection.ssh.connection import SSHConnection

SSHD = "/usr/sbin/sshd"
SUDOERS_FILE = "/etc/sudoers.d/rigger-tests"
USER_NOPASSWD = "rigger-ssh"  # sudo without password
USER_NOSUDO = "rigger-nosudo"  # no sudo rule at all
USER_PASSWORD = "rigger-pw"  # sudo with a password
PASSWORD = "rigger-pw-S3cret-42"
ALL_USERS = (USER_NOPASSWD, USER_NOSUDO, USER_PASSWORD)


class HarnessError(RuntimeError):
    """A prerequisite for the real-sshd tests is missing."""


def require_prerequisites() -> None:
    if not os.path.exists(SSHD):
        raise HarnessError(f"{SSHD} is missing: install openssh-server (bash scripts/ci/setup_ssh.sh)")
    for tool in ("ssh-keygen", "useradd", "sudo"):
        if shutil.which(tool) is None:
            raise HarnessError(f"{tool} is missing: run bash scripts/ci/setup_ssh.sh")
    if os.geteuid() != 0:
        raise HarnessError("the SSH tests must run as root (they create users and start sshd)")


def keygen(path: Path, kind: str = "ed25519") -> Path:
    if path.exists():
        path.unlink()
        Path(f"{path}.pub").unlink(missing_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "rigger-test", "-f", str(path)],
        check=True,
    )
    return path


def fingerprint(public_key_file: Path) -> str:
    """``SHA256:...`` as ssh-keygen prints it (an independent check of ours)."""
    out = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(public_key_file)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.split()[1]


KEEP_AUTHORIZED_KEYS = 16


def _user_exists(name: str) -> bool:
    return subprocess.run(["id", "-u", name], capture_output=True).returncode == 0


def ensure_user(name: str, authorized_key: Path, password: str | None = None) -> Path:
    """Create (or refresh) a login user with /bin/sh that accepts this key.

    The key is added to the most recent few (not replacing them), so two test sessions
    running at once (each with its own generated key) do not lock each other out."""
    if not _user_exists(name):
        created = subprocess.run(["useradd", "-m", "-s", "/bin/sh", name], capture_output=True, text=True)
        if created.returncode != 0 and not _user_exists(name):  # a concurrent session may win
            raise HarnessError(f"useradd {name} failed: {created.stderr.strip()}")
    if password is None:
        subprocess.run(["usermod", "-p", "*", name], check=True)
    else:
        subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True)
    home = Path(f"/home/{name}")
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    keys = ssh_dir / "authorized_keys"
    existing = keys.read_text().splitlines() if keys.exists() else []
    new_key = Path(f"{authorized_key}.pub").read_text().strip()
    kept = [line for line in existing if line.strip() and line.strip() != new_key]
    temp = ssh_dir / f"authorized_keys.{os.getpid()}"
    temp.write_text("\n".join([*kept[-(KEEP_AUTHORIZED_KEYS - 1) :], new_key]) + "\n")
    temp.chmod(0o600)
    temp.replace(keys)
    shutil.chown(ssh_dir, name, name)
    shutil.chown(keys, name, name)
    return home


def install_sudo_rules() -> None:
    rules = (
        f"{USER_NOPASSWD} ALL=(ALL) NOPASSWD: ALL\n"
        f"{USER_PASSWORD} ALL=(ALL) ALL\n"
        f"Defaults:{USER_PASSWORD} !lecture, passwd_tries=3\n"
    )
    temp = Path(f"{SUDOERS_FILE}.{os.getpid()}.tmp")  # a dotted name: sudo ignores it
    temp.write_text(rules)
    temp.chmod(0o440)
    subprocess.run(["visudo", "-c", "-q", "-f", str(temp)], check=True)
    temp.replace(SUDOERS_FILE)


def prepare_users(work: Path) -> Path:
    """Create the three test users with one generated client key. Returns the key path."""
    require_prerequisites()
    client_key = keygen(work / "client_ed25519")
    for user in ALL_USERS:
        ensure_user(user, client_key, PASSWORD if user == USER_PASSWORD else None)
    install_sudo_rules()
    return client_key


def free_port(addresses: Sequence[str]) -> int:
    for _ in range(200):
        port = random.randint(20000, 45000)
        if all(_bindable(address, port) for address in addresses):
            return port
    raise HarnessError("no free TCP port found for sshd")


def _bindable(address: str, port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


@dataclass
class Sshd:
    """One running sshd listening on ``port`` on every address in ``addresses``."""

    addresses: tuple[str, ...]
    port: int
    host_key: Path
    process: subprocess.Popen[bytes]
    log_file: Path

    @property
    def address(self) -> str:
        return self.addresses[0]

    def known_hosts_lines(self) -> str:
        kind, blob = Path(f"{self.host_key}.pub").read_text().split()[:2]
        return "".join(f"[{a}]:{self.port} {kind} {blob}\n" for a in self.addresses)

    def fingerprint(self) -> str:
        return fingerprint(Path(f"{self.host_key}.pub"))

    def session_pids(self) -> list[int]:
        """The per-connection sshd processes (children of the listener) and their children."""
        found: list[int] = []
        parents = {self.process.pid}
        for _ in range(4):
            children = [pid for pid, ppid in _process_parents() if ppid in parents and pid not in found]
            found.extend(children)
            parents = set(children)
        return found

    def kill_all(self) -> None:
        """SIGKILL the listener and every session: a host dying under a run."""
        pids = self.session_pids()
        self.process.kill()
        self.process.wait()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.kill_all()


def _process_parents() -> list[tuple[int, int]]:
    pairs = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pairs.append((int(entry), int(fields[1])))
    return pairs


def start_sshd(
    work: Path,
    name: str,
    addresses: Sequence[str],
    *,
    host_key: Path | None = None,
    extra_config: Sequence[str] = (),
    port: int | None = None,
) -> Sshd:
    """Start ``sshd -D`` with its own config, host key and log; wait until it answers."""
    require_prerequisites()
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    directory = work / f"sshd-{name}"
    directory.mkdir(parents=True, exist_ok=True)
    key = host_key or keygen(directory / "host_ed25519")
    port = port or free_port(addresses)
    config = directory / "sshd_config"
    log_file = directory / "sshd.log"
    lines = [
        f"Port {port}",
        *(f"ListenAddress {a}" for a in addresses),
        f"HostKey {key}",
        f"PidFile {directory / 'sshd.pid'}",
        "AuthorizedKeysFile .ssh/authorized_keys",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "PermitRootLogin no",
        "StrictModes no",
        f"AllowUsers {' '.join(ALL_USERS)}",
        "MaxSessions 200",
        "MaxStartups 200:30:400",
        "UseDNS no",
        "PrintMotd no",
        "Subsystem sftp internal-sftp",
        *extra_config,
    ]
    config.write_text("\n".join(lines) + "\n")
    subprocess.run([SSHD, "-t", "-f", str(config)], check=True)
    process = subprocess.Popen(
        [SSHD, "-D", "-f", str(config), "-E", str(log_file)],
        stdin=subprocess.DEVNULL,
    )
    server = Sshd(tuple(addresses), port, key, process, log_file)
    _wait_for_banner(server)
    return server


def _wait_for_banner(server: Sshd, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise HarnessError(f"sshd exited {server.process.returncode}: {server.log_file.read_text()}")
        try:
            with socket.create_connection((server.address, server.port), timeout=1) as sock:
                if sock.recv(64).startswith(b"SSH-2.0"):
                    return
        except OSError:
            time.sleep(0.02)
    server.stop()
    raise HarnessError(f"sshd on {server.address}:{server.port} did not answer in {timeout_s:g}s")


def host_vars(
    server: Sshd,
    key: Path,
    known_hosts: Path,
    *,
    user: str = USER_NOPASSWD,
    address: str | None = None,
    **extra: object,
) -> dict[str, object]:
    """Ansible-style host variables pointing at ``server``."""
    return {
        "ansible_host": address or server.address,
        "ansible_port": server.port,
        "ansible_user": user,
        "ansible_ssh_private_key_file": str(key),
        "known_hosts_file": str(known_hosts),
        "ssh_connect_timeout_s": 5,
        **extra,
    }


@dataclass
class Lab:
    work: Path
    client_key: Path
    sshd: Sshd
    known_hosts: Path

    def vars(self, **extra: object) -> dict[str, object]:
        return host_vars(self.sshd, self.client_key, self.known_hosts, **extra)

    def connect(self, host_name: str = "gpu1", **extra: object) -> SSHConnection:
        from engine.connection.ssh.connection import SSHConnection

        return SSHConnection.from_host_vars(host_name, self.vars(**extra))


@contextlib.contextmanager
def running_lab(work: Path, name: str, addresses: Sequence[str]) -> Iterator[Lab]:
    """The lab users, an sshd named ``name`` answering on ``addresses`` and its known_hosts
    under ``work``, until the block ends (then sshd is stopped)."""
    work.chmod(0o755)
    client_key = prepare_users(work)
    server = start_sshd(work, name, tuple(addresses))
    known_hosts = work / "known_hosts"
    known_hosts.write_text(server.known_hosts_lines())
    try:
        yield Lab(work, client_key, server, known_hosts)
    finally:
        server.stop()

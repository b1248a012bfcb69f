"""The benchmark's fleet: 20 real sshd processes, one per loopback address, as 20 hosts.

A dedicated user (``rigger-bench``, shell /bin/sh, no sudo) with its own key, so no rc file
runs per command (root's ~/.bashrc costs 80-200 ms) and the test suite's users are not
disturbed. Reuses the test lab's sshd launcher.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration" / "ssh"))

import sshlab

BENCH_USER = "rigger-bench"
ADDRESSES = tuple(f"127.0.0.{i}" for i in range(21, 41))


@dataclass
class Fleet:
    work: Path
    key: Path
    known_hosts: Path
    servers: list[sshlab.Sshd]

    @property
    def hosts(self) -> list[tuple[str, int]]:
        return [(server.address, server.port) for server in self.servers]

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


def start_fleet(work: Path) -> Fleet:
    sshlab.require_prerequisites()
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)
    key = sshlab.keygen(work / "bench_ed25519")
    sshlab.ensure_user(BENCH_USER, key)
    host_key = sshlab.keygen(work / "host_ed25519")
    servers: list[sshlab.Sshd] = []
    try:
        for address in ADDRESSES:
            servers.append(
                sshlab.start_sshd(
                    work,
                    address,
                    [address],
                    host_key=host_key,
                    extra_config=[f"AllowUsers {BENCH_USER}"],
                )
            )
    except BaseException:
        for server in servers:
            server.stop()
        raise
    known_hosts = work / "known_hosts"
    known_hosts.write_text("".join(server.known_hosts_lines() for server in servers))
    return Fleet(work, key, known_hosts, servers)

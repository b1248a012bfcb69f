"""The benchmark's fleet: real sshd processes on loopback addresses, one address per host.

A dedicated user (``rigger-bench``, shell /bin/sh, no sudo) with its own key, so no rc file
runs per command (root's ~/.bashrc costs 80-200 ms) and the test suite's users are not
disturbed. Reuses the test lab's sshd launcher (its config allows 200 sessions and 200
unauthenticated start-ups per listener, enough for 100 hosts connecting at once). One sshd
listens on up to 16 addresses (OpenSSH's limit of listen sockets); every connection gets its
own forked sshd process either way.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration" / "ssh"))

import sshlab

BENCH_USER = "rigger-bench"
FIRST_ADDRESS = 21  # 127.0.0.21 onwards: away from the test suite's addresses
ADDRESSES_PER_SSHD = 16  # sshd's MAX_LISTEN_SOCKS


@dataclass
class Fleet:
    work: Path
    key: Path
    known_hosts: Path
    servers: list[sshlab.Sshd]

    @property
    def hosts(self) -> list[tuple[str, int]]:
        return [(address, server.port) for server in self.servers for address in server.addresses]

    @property
    def listener_pids(self) -> set[int]:
        return {server.process.pid for server in self.servers}

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


def fleet_addresses(size: int) -> list[str]:
    if not 1 <= size <= 255 - FIRST_ADDRESS:
        raise ValueError(f"a fleet of {size} hosts does not fit 127.0.0.{FIRST_ADDRESS}-254")
    return [f"127.0.0.{FIRST_ADDRESS + i}" for i in range(size)]


def start_fleet(work: Path, size: int = 20) -> Fleet:
    sshlab.require_prerequisites()
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)
    key = sshlab.keygen(work / "bench_ed25519")
    sshlab.ensure_user(BENCH_USER, key)
    host_key = sshlab.keygen(work / "host_ed25519")
    addresses = fleet_addresses(size)
    servers: list[sshlab.Sshd] = []
    try:
        for start in range(0, size, ADDRESSES_PER_SSHD):
            group = addresses[start : start + ADDRESSES_PER_SSHD]
            servers.append(
                sshlab.start_sshd(work, group[0], group, host_key=host_key, extra_config=[f"AllowUsers {BENCH_USER}"])
            )
    except BaseException:
        for server in servers:
            server.stop()
        raise
    known_hosts = work / "known_hosts"
    known_hosts.write_text("".join(server.known_hosts_lines() for server in servers))
    return Fleet(work, key, known_hosts, servers)

"""Where rigger's fan-out time goes: its SSH connection's phases over the benchmark fleet.

    python bench/fleet_phases.py [--hosts 100] [--tasks 10] [--forks 20]

For every host, ``forks`` at a time, in one process: the handshake (TCP, key exchange, host
key check, publickey auth), the remote python's start, ``tasks`` x `true`, close. Prints each
phase's wall time and this process's CPU during it. Run it under /tmp/rigger-slow.lock.
Needs root (creates the bench user, starts sshd).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO
from ssh.fleet import BENCH_USER, start_fleet

sys.path.insert(0, str(REPO))

from engine.connection.ssh.connection import SSHConnection


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--forks", type=int, default=20)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rigger-fleet-phases-") as tmp:
        fleet = start_fleet(Path(tmp) / "fleet", opts.hosts)
        try:
            conns = [
                SSHConnection.from_host_vars(
                    f"h{i}",
                    {
                        "ansible_host": address,
                        "ansible_port": port,
                        "ansible_user": BENCH_USER,
                        "ansible_ssh_private_key_file": str(fleet.key),
                        "known_hosts_file": str(fleet.known_hosts),
                    },
                )
                for i, (address, port) in enumerate(fleet.hosts)
            ]

            def commands(conn: SSHConnection) -> None:
                for _ in range(opts.tasks):
                    conn.run(["true"])

            phases: list[tuple[str, Callable[[SSHConnection], object]]] = [
                ("handshake", SSHConnection.transport),
                ("remote python start + 1 x true", lambda conn: conn.run(["true"])),
                (f"{opts.tasks} x true", commands),
                ("close", SSHConnection.close),
            ]
            print(f"{opts.hosts} hosts, {opts.forks} at a time")
            for name, phase in phases:
                wall, cpu = time.perf_counter(), time.process_time()
                with ThreadPoolExecutor(opts.forks) as pool:
                    list(pool.map(phase, conns))
                print(
                    f"{name:31} wall {time.perf_counter() - wall:6.2f} s   CPU here {time.process_time() - cpu:6.2f} s"
                )
        finally:
            fleet.stop()


if __name__ == "__main__":
    main()

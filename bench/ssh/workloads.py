"""The same workloads written for each tool: N x `true` on K hosts, no fact gathering."""

from __future__ import annotations

from pathlib import Path

from .fleet import BENCH_USER, Fleet


def rigger_files(
    fleet: Fleet, root: Path, hosts: int, tasks: int, *, remote_python: bool = True, run_lock: bool = True
) -> tuple[Path, Path]:
    names = "".join(
        f"    h{i}: {{ansible_host: {a}, ansible_port: {p}}}\n" for i, (a, p) in enumerate(fleet.hosts[:hosts])
    )
    inventory = root / f"rigger_inv_{hosts}_{'remote' if remote_python else 'exec'}_{run_lock}.yml"
    inventory.write_text(
        "all:\n  vars:\n"
        f"    ansible_user: {BENCH_USER}\n"
        f"    ansible_ssh_private_key_file: {fleet.key}\n"
        f"    known_hosts_file: {fleet.known_hosts}\n"
        f"    ssh_remote_python: {str(remote_python).lower()}\n"
        f"    rigger_run_lock: {str(run_lock).lower()}\n"
        "  hosts:\n" + names
    )
    book = root / f"rigger_{hosts}x{tasks}.yml"
    book.write_text(_ansible_play(tasks))
    return book, inventory


def ansible_files(fleet: Fleet, root: Path, hosts: int, tasks: int) -> tuple[Path, Path]:
    lines = "".join(f"h{i} ansible_host={a} ansible_port={p}\n" for i, (a, p) in enumerate(fleet.hosts[:hosts]))
    inventory = root / f"ansible_inv_{hosts}.ini"
    inventory.write_text(
        "[fleet]\n" + lines + "\n[fleet:vars]\n"
        f"ansible_user={BENCH_USER}\n"
        f"ansible_ssh_private_key_file={fleet.key}\n"
        "ansible_python_interpreter=/usr/bin/python3\n"
        f"ansible_ssh_common_args='-o UserKnownHostsFile={fleet.known_hosts} "
        "-o StrictHostKeyChecking=yes'\n"
    )
    book = root / f"ansible_{hosts}x{tasks}.yml"
    book.write_text(_ansible_play(tasks))
    return book, inventory


def pyinfra_files(fleet: Fleet, root: Path, hosts: int, tasks: int) -> tuple[Path, Path]:
    common = (
        f"'ssh_user': {BENCH_USER!r}, 'ssh_key': {str(fleet.key)!r}, "
        f"'ssh_known_hosts_file': {str(fleet.known_hosts)!r}, "
        "'ssh_strict_host_key_checking': 'yes'"
    )
    entries = "".join(f"    ({a!r}, {{'ssh_port': {p}, {common}}}),\n" for a, p in fleet.hosts[:hosts])
    inventory = root / f"pyinfra_inv_{hosts}.py"
    inventory.write_text("hosts = [\n" + entries + "]\n")
    deploy = root / f"pyinfra_{hosts}x{tasks}.py"
    deploy.write_text(
        "from pyinfra.operations import server\n"
        f"for i in range({tasks}):\n"
        "    server.shell(name=f't{i}', commands=['true'])\n"
    )
    return deploy, inventory


def _ansible_play(tasks: int) -> str:
    body = "".join(f"    - name: t{i}\n      command: 'true'\n" for i in range(tasks))
    return f"- hosts: all\n  gather_facts: false\n  tasks:\n{body}"

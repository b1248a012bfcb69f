"""A converged fleet checked again: `rigger watch`'s warm rounds against cold re-runs.

One round = plan 10 converged tasks (``file: path=/etc state=directory``, which reads the
host each time) on every host of a real sshd fleet on loopback (bench/ssh/fleet.py), no
fact gathering, ``--forks`` hosts in parallel for every tool. Compared:

- rigger watch, warm: one watcher process running 1 + W rounds, connections and remote
  interpreters kept open; a warm round's wall time is the median gap between the ends of
  consecutive rounds (events.jsonl), its CPU (run of 1 + W rounds - run of 1 round) / W.
- rigger, cold: `rigger run --check` started afresh each round (cron-style re-runs).
- ansible-core, cold: `ansible-playbook --check` each round, as an ansible-pull-style
  re-run from cron does (ControlPersist masters stopped between rounds).
- pyinfra, cold: `pyinfra --dry` each round.

Reported: wall time per round and controller CPU per host per round (user + sys of the
whole process tree), medians of --repeats, ratios against the warm watcher.

    python bench/watch_bench.py [--sizes 20,50,100] [--warm-rounds 5] [--repeats 3] [--forks 20]

Needs root (creates the bench user, starts sshd).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, Measurement, measured, median, rigger_command, tool_venv
from ssh.fleet import Fleet, start_fleet
from ssh.workloads import ansible_files, pyinfra_files, rigger_files

TASK = "      file: {path: /etc, state: directory}\n"


def _converged_play(tasks: int) -> str:
    body = "".join(f"    - name: t{i}\n{TASK}" for i in range(tasks))
    return f"- hosts: all\n  gather_facts: false\n  tasks:\n{body}"


def _rigger_files(fleet: Fleet, root: Path, hosts: int, tasks: int) -> tuple[Path, Path]:
    book, inventory = rigger_files(fleet, root, hosts, tasks)
    book.write_text(_converged_play(tasks))
    return book, inventory


def _watch(fleet: Fleet, root: Path, hosts: int, tasks: int, rounds: int, forks: int) -> tuple[Measurement, Path]:
    book, inventory = _rigger_files(fleet, root, hosts, tasks)
    state = Path(tempfile.mkdtemp(prefix=f"watch-state-{hosts}-{rounds}-", dir=root))
    argv = [*rigger_command(), "watch", str(book), "-i", str(inventory), "--forks", str(forks)]
    argv += ["--interval", "0", "--cycles", str(rounds), "--state-dir", str(state)]
    return measured(argv, {"PYTHONPATH": str(REPO)}, cwd=REPO), state


def _warm_round_walls(state: Path) -> list[float]:
    """Seconds between the ends of consecutive rounds, the first (cold) round left out."""
    ends = [
        e["time"]
        for line in (state / "events.jsonl").read_text().splitlines()
        if (e := json.loads(line))["event"] == "cycle"
    ]
    return [b - a for a, b in itertools.pairwise(ends)]


def cold_runners(fleet: Fleet, root: Path, forks: int) -> dict[str, Callable[[int, int], Measurement]]:
    ansible_bin, pyinfra_bin = tool_venv("ansible"), tool_venv("pyinfra")

    def rigger(hosts: int, tasks: int) -> Measurement:
        book, inventory = _rigger_files(fleet, root, hosts, tasks)
        argv = [*rigger_command(), "run", str(book), "-i", str(inventory), "--check", "--forks", str(forks)]
        return measured(argv, {"PYTHONPATH": str(REPO)}, cwd=REPO)

    def ansible(hosts: int, tasks: int) -> Measurement:
        book, inventory = ansible_files(fleet, root, hosts, tasks)
        book.write_text(_converged_play(tasks))
        env = {"ANSIBLE_PIPELINING": "True", "ANSIBLE_FORKS": str(forks), "ANSIBLE_NOCOLOR": "1"}
        env["ANSIBLE_LOCAL_TEMP"] = str(root / "ansible-tmp")
        env["ANSIBLE_SSH_ARGS"] = "-o ControlMaster=no"  # each round a fresh handshake, as from cron
        return measured([str(ansible_bin / "ansible-playbook"), "--check", "-i", str(inventory), str(book)], env)

    def pyinfra(hosts: int, tasks: int) -> Measurement:
        deploy, inventory = pyinfra_files(fleet, root, hosts, tasks)
        deploy.write_text(
            f"from pyinfra.operations import files\nfor i in range({tasks}):\n"
            "    files.directory(name=f't{i}', path='/etc')\n"
        )
        argv = [str(pyinfra_bin / "pyinfra"), "-y", "--dry", "--parallel", str(forks), str(inventory), str(deploy)]
        return measured(argv, cwd=root)

    return {"rigger cold": rigger, "ansible cold": ansible, "pyinfra cold": pyinfra}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="20,50,100")
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--warm-rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--forks", type=int, default=20)
    opts = parser.parse_args()
    sizes = [int(s) for s in opts.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="rigger-watch-bench-") as tmp:
        root = Path(tmp)
        fleet = start_fleet(root / "fleet", max(sizes))
        try:
            cold = cold_runners(fleet, root, opts.forks)
            for size in sizes:
                report(size, _measure(fleet, root, size, cold, opts), opts)
        finally:
            fleet.stop()
    print(f"\nload average at the end {'/'.join(f'{v:.2f}' for v in os.getloadavg())}; {os.cpu_count()} CPUs")


def _measure(
    fleet: Fleet, root: Path, size: int, cold: dict[str, Callable[[int, int], Measurement]], opts: argparse.Namespace
) -> dict[str, tuple[float, float]]:
    """tool -> (wall s per round, CPU ms per host per round), medians over the repeats."""
    found: dict[str, list[tuple[float, float]]] = {}
    for _ in range(opts.repeats):
        one, _ = _watch(fleet, root, size, opts.tasks, 1, opts.forks)
        many, state = _watch(fleet, root, size, opts.tasks, 1 + opts.warm_rounds, opts.forks)
        warm_wall = median(_warm_round_walls(state))
        warm_cpu = (many.cpu_s - one.cpu_s) / opts.warm_rounds
        found.setdefault("rigger watch warm", []).append((warm_wall, warm_cpu / size * 1000))
        for tool, run in cold.items():
            m = run(size, opts.tasks)
            found.setdefault(tool, []).append((m.wall_s, m.cpu_s / size * 1000))
    return {tool: (median([w for w, _ in runs]), median([c for _, c in runs])) for tool, runs in found.items()}


def report(size: int, figures: dict[str, tuple[float, float]], opts: argparse.Namespace) -> None:
    base_wall, base_cpu = figures["rigger watch warm"]
    print(f"\n{size} hosts x {opts.tasks} converged tasks, forks {opts.forks}, median of {opts.repeats}")
    print("| how | wall per round (s) | vs warm | CPU per host per round (ms) | vs warm |")
    print("|---|---|---|---|---|")
    for tool, (wall, cpu) in figures.items():
        print(f"| {tool} | {wall:.2f} | {wall / base_wall:.1f}x | {cpu:.1f} | {cpu / base_cpu:.1f}x |")


if __name__ == "__main__":
    main()

"""``rigger validate`` against ``ansible-playbook --syntax-check`` on a 729-host inventory
(issue 20: validate must not be slower). Both are run as a user runs them, in a process of
their own, interleaved, several times; the medians are printed.

    python bench/validate_large_inventory.py [HOSTS] [ROUNDS] [OTHER_CHECKOUT]

With OTHER_CHECKOUT (e.g. /work/main), that checkout's rigger is timed too ("before").

ansible-core comes from the repository's .venv-ansible (2.19.14). Not a timed test: the
figures go to bench/README.md.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fixtures.large_inventory import write_large_inventory

ANSIBLE = REPO / ".venv-ansible" / "bin" / "ansible-playbook"


def _seconds(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run; CPU (user + system of the child) is what a busy
    machine disturbs least."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{command[0]} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def main(hosts: int, rounds: int, other: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="validate-bench-") as tmp:
        root = Path(tmp)
        inventory, playbook = write_large_inventory(root, hosts)
        env = {**os.environ, "PYTHONPATH": str(REPO), "ANSIBLE_CONFIG": str(root / "none.cfg"), "HOME": tmp}
        commands = {
            "rigger validate": [sys.executable, "-m", "engine.cli", "validate", "-i", str(inventory), str(playbook)],
            "rigger validate -e x=1": [
                *[sys.executable, "-m", "engine.cli", "validate", "-i", str(inventory), str(playbook)],
                *["-e", "nvidia_driver_branch=560"],
            ],
            "ansible-playbook --syntax-check": [str(ANSIBLE), "-i", str(inventory), "--syntax-check", str(playbook)],
        }
        if other:
            # the other checkout's engine first on the path (the script's own REPO stays for the fixture)
            commands["other checkout: rigger validate"] = [
                *["env", f"PYTHONPATH={other}", sys.executable, "-m", "engine.cli"],
                *["validate", "-i", str(inventory), str(playbook)],
            ]
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(rounds):
            for name, command in commands.items():
                times[name].append(_seconds(command, root, env))
        print(f"{hosts} hosts, {rounds} rounds; median wall (min-max) and median CPU seconds:")
        for name, values in times.items():
            wall, cpu = [v[0] for v in values], [v[1] for v in values]
            print(
                f"  {name:34} wall {statistics.median(wall):5.2f} ({min(wall):.2f}-{max(wall):.2f})"
                f"  cpu {statistics.median(cpu):5.2f}"
            )


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]) if args else 729, int(args[1]) if len(args) > 1 else 5, args[2] if len(args) > 2 else None)

"""Fleet scale, side by side: the 10-task fan-out at 20, 50 and 100 hosts.

rigger, pyinfra and ansible-core drive the same real sshds on loopback (one address per host,
bench/ssh/fleet.py), the same workload (10 x `true` per host, no fact gathering, bench/ssh/
workloads.py) and the same number of hosts in parallel (``--forks``, 20 by default, for all
three). Every run is cold: each tool makes its own connections (ansible's ControlPersist
masters are stopped after each run, so its next run handshakes again, as a fresh
`ansible-playbook` would). Sizes and tools are interleaved round by round; medians reported.

Per run: wall time; controller CPU (user + sys of every process the tool started, reaped:
ansible's forks and ssh masters included) per host; peak memory (summed PSS of the tool's
process tree, sampled every 50 ms). Each round holds ``--lock`` (the machine's lock for timed
runs), so rounds never overlap another session's heavy work.

    python bench/fleet_bench.py [--sizes 20,50,100] [--tasks 10] [--repeats 3] [--forks 20]
                                [--tools rigger,pyinfra,ansible] [--lock /tmp/rigger-slow.lock]

Needs root (creates the bench user, starts sshd).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Case, Measurement, interleaved, median, shared_lock
from ssh.fleet import start_fleet
from ssh_bench import rigger_runner, tool_runners

TOOLS = ("rigger", "pyinfra", "ansible")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="20,50,100")
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--forks", type=int, default=20)
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument(
        "--baseline", type=Path, help="also run rigger from this checkout (before a change) as rigger-base"
    )
    parser.add_argument("--lock", default="/tmp/rigger-slow.lock", help="flock'd around each round ('' for none)")
    opts = parser.parse_args()
    sizes = [int(s) for s in opts.sizes.split(",")]
    tools = [t for t in TOOLS if t in opts.tools.split(",")]
    _raise_fd_limit()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="rigger-fleet-bench-") as tmp:
        root = Path(tmp)
        fleet = start_fleet(root / "fleet", max(sizes))
        try:
            runners = tool_runners(fleet, root, tools, forks=opts.forks)
            if opts.baseline:
                runners["rigger-base"] = rigger_runner(fleet, root, opts.forks, tree=opts.baseline.resolve())
                tools = [*tools, "rigger-base"]
            cases = [
                Case(tool, str(size), lambda run=runners[tool], h=size: run(h, opts.tasks))
                for size in sizes
                for tool in tools
            ]
            smallest = [case for case in cases if case.label == str(sizes[0])]  # warms every tool up
            runs = interleaved(cases, opts.repeats, lambda: shared_lock(opts.lock or None), smallest)
        finally:
            fleet.stop()
    print(f"load average before {_load(load_before)}, after {_load(os.getloadavg())}; {os.cpu_count()} CPUs")
    report(runs, tools, sizes, opts)


def report(
    runs: dict[tuple[str, str], list[Measurement]], tools: list[str], sizes: list[int], opts: argparse.Namespace
) -> None:
    walls: dict[tuple[str, int], float] = {}
    for size in sizes:
        print(f"\n{size} hosts x {opts.tasks} tasks, forks {opts.forks}, median of {opts.repeats}")
        print("| tool | wall (s) | vs rigger | CPU per host (ms) | vs rigger | peak memory (MiB) | vs rigger |")
        print("|---|---|---|---|---|---|---|")
        medians = {tool: _medians(runs[(tool, str(size))], size) for tool in tools}
        base = medians.get("rigger", medians[tools[0]])
        for tool in tools:
            wall, cpu, peak = medians[tool]
            walls[(tool, size)] = wall
            print(
                f"| {tool} | {wall:.2f} | {wall / base[0]:.1f}x | {cpu:.0f} | {cpu / base[1]:.1f}x "
                f"| {peak:.0f} | {peak / base[2]:.1f}x |"
            )
    print(f"\nwall time growth from {sizes[0]} hosts (linear would be the host ratio):")
    for tool in tools:
        steps = ", ".join(
            f"{size}: x{walls[(tool, size)] / walls[(tool, sizes[0])]:.2f} (hosts x{size / sizes[0]:.1f})"
            for size in sizes[1:]
        )
        print(f"  {tool:8} {steps}")
    print("\n" + chart(walls, tools, sizes))


def chart(walls: dict[tuple[str, int], float], tools: list[str], sizes: list[int], width: int = 50) -> str:
    """Horizontal bars of wall time, one per tool and size; a tool more than 10x slower than
    the fastest is clipped (``>``) so the others stay readable."""
    fastest = {size: min(walls[(tool, size)] for tool in tools) for size in sizes}
    top = max(wall for (_, size), wall in walls.items() if wall <= 10 * fastest[size])
    lines = [f"wall time (s), one bar per tool and fleet size; full width = {top:.1f} s"]
    for size in sizes:
        for tool in tools:
            wall = walls[(tool, size)]
            bar = "#" * max(1, round(min(wall, top) / top * width)) + (">" if wall > top else "")
            lines.append(f"{size:4} {tool:11} {bar} {wall:.2f}")
    return "\n".join(lines)


def _medians(runs: list[Measurement], hosts: int) -> tuple[float, float, float]:
    return (
        median([r.wall_s for r in runs]),
        median([r.cpu_s for r in runs]) / hosts * 1000,
        median([r.peak_pss_mb for r in runs]),
    )


def _raise_fd_limit() -> None:
    """Up to the hard limit for us and the tools we start: 100 hosts is 100+ sockets and pipes."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _load(load: tuple[float, float, float]) -> str:
    return "/".join(f"{value:.2f}" for value in load)


if __name__ == "__main__":
    main()

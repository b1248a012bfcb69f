"""SSH overhead, side by side: rigger vs ansible-core (ControlPersist + pipelining) vs pyinfra.

All three drive the same real sshd (Debian OpenSSH) on loopback, as a dedicated user whose
shell runs no rc files. Workloads, each task a `true` command, no fact gathering:
  (a) 1 host: 1 task and 50 tasks; per-task overhead = (t50 - t1) / 49
  (b) 20 hosts x 10 tasks, forks 20: wall time
Runs are interleaved round by round (drift hits every tool alike); medians are reported.
``rigger-exec`` is rigger without its persistent remote python (one SSH exec channel per
command), to show what the remote python buys.

    python bench/ssh_bench.py [--tasks 50] [--repeats 5] [--hosts 20] [--fleet-tasks 10]
                              [--tools rigger,rigger-exec,ansible,pyinfra]

Needs root (creates the bench user, starts sshd). ansible-core and pyinfra are installed
into bench/.venvs/ on first use (bench/common.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, Case, Measurement, interleaved, measured, median, report_per_task, rigger_command, tool_venv
from ssh.fleet import Fleet, start_fleet
from ssh.workloads import ansible_files, pyinfra_files, rigger_files

FORKS = 20


Runner = Callable[[int, int], Measurement]


def rigger_runner(
    fleet: Fleet, root: Path, forks: int, *, remote: bool = True, run_lock: bool = True, tree: Path = REPO
) -> Runner:
    """rigger from ``tree`` (a checkout); ``remote=False`` is its exec-channel-per-command mode
    (ssh_remote_python: false)."""

    def rigger(hosts: int, tasks: int) -> Measurement:
        book, inv = rigger_files(fleet, root, hosts, tasks, remote_python=remote, run_lock=run_lock)
        argv = [*rigger_command(), "run", str(book), "-i", str(inv), "--forks", str(forks)]
        return measured(argv, {"PYTHONPATH": str(tree)}, cwd=tree)

    return rigger


def tool_runners(
    fleet: Fleet, root: Path, tools: list[str], run_lock: bool = True, forks: int = FORKS
) -> dict[str, Runner]:
    """tool -> run(hosts, tasks), each with ``forks`` hosts in parallel (failing loudly on errors)."""
    runners: dict[str, Runner] = {}
    for variant, remote in (("rigger", True), ("rigger-exec", False)):
        if variant in tools:
            runners[variant] = rigger_runner(fleet, root, forks, remote=remote, run_lock=run_lock)
    if "ansible" in tools:
        ansible_bin = tool_venv("ansible")
        env = {
            "ANSIBLE_PIPELINING": "True",
            "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=120s",
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(root / "cp"),
            "ANSIBLE_LOCAL_TEMP": str(root / "ansible-tmp"),
            "ANSIBLE_FORKS": str(forks),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_RETRY_FILES_ENABLED": "False",
        }

        def ansible(hosts: int, tasks: int) -> Measurement:
            book, inv = ansible_files(fleet, root, hosts, tasks)
            return measured([str(ansible_bin / "ansible-playbook"), "-i", str(inv), str(book)], env)

        runners["ansible"] = ansible
    if "pyinfra" in tools:
        pyinfra_bin = tool_venv("pyinfra")

        def pyinfra(hosts: int, tasks: int) -> Measurement:
            deploy, inv = pyinfra_files(fleet, root, hosts, tasks)
            argv = [str(pyinfra_bin / "pyinfra"), "-y", "--parallel", str(forks), str(inv), str(deploy)]
            return measured(argv, cwd=root)

        runners["pyinfra"] = pyinfra
    return runners


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--fleet-tasks", type=int, default=10)
    parser.add_argument("--tools", default="rigger,rigger-exec,ansible,pyinfra")
    parser.add_argument(
        "--no-run-lock", action="store_true", help="rigger without its per-host run lock (the others have none)"
    )
    opts = parser.parse_args()
    tools = [t for t in opts.tools.split(",") if t]
    with tempfile.TemporaryDirectory(prefix="rigger-ssh-bench-") as tmp:
        root = Path(tmp)
        fleet = start_fleet(root / "fleet")
        try:
            runners = tool_runners(fleet, root, tools, run_lock=not opts.no_run_lock)
            cases = [
                Case(tool, label, lambda run=run, h=h, n=n: run(h, n).wall_s)
                for label, h, n in (
                    ("1", 1, 1),
                    (str(opts.tasks), 1, opts.tasks),
                    ("fleet", opts.hosts, opts.fleet_tasks),
                )
                for tool, run in runners.items()
            ]
            times = interleaved(cases, opts.repeats)
        finally:
            fleet.stop()
    order = [t for t in ("rigger", "rigger-exec", "ansible", "pyinfra") if t in runners]
    report_per_task(
        times, order, opts.tasks, f"(a) SSH loopback, 1 host, {opts.tasks} x `true`, median of {opts.repeats}"
    )
    print("paired per-task overhead (median over rounds of (t_n - t_1) / (n - 1)), less drift-prone:")
    for tool in order:
        pairs = zip(times[(tool, str(opts.tasks))], times[(tool, "1")], strict=True)
        paired = median([(many - one) / (opts.tasks - 1) * 1000 for many, one in pairs])
        print(f"  {tool:12} {paired:8.2f} ms")
    print(f"\n(b) SSH loopback, {opts.hosts} hosts x {opts.fleet_tasks} tasks, forks {FORKS}, median of {opts.repeats}")
    print(f"{'tool':10} {'wall (s)':>9} {'vs rigger':>10}")
    walls = {tool: median(times[(tool, "fleet")]) for tool in order}
    for tool in order:
        print(f"{tool:10} {walls[tool]:9.3f} {walls[tool] / walls['rigger']:9.1f}x")


if __name__ == "__main__":
    main()

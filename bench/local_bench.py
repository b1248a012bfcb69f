"""Per-task overhead on the local connection: rigger vs ansible-core vs pyinfra.

The same workload for each tool: N tasks that each run `true`, no fact gathering.
Runs are interleaved, medians reported, per-task overhead = (t_N - t_1) / (N - 1).

    python bench/local_bench.py [--tasks 50] [--repeats 7]

ansible-core and pyinfra are installed by this script into bench/.venvs/.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from common import REPO, Case, interleaved, report_per_task, rigger_command, timed, tool_venv


def write_workloads(root: Path, n: int) -> dict[str, Path]:
    files = {}
    for count in (1, n):
        tasks = "".join(f"    - name: t{i}\n      command: 'true'\n" for i in range(count))
        rigger = root / f"rigger_{count}.yml"
        rigger.write_text(f"- hosts: localhost\n  gather_facts: false\n  tasks:\n{tasks}")
        ansible = root / f"ansible_{count}.yml"
        ansible.write_text(f"- hosts: localhost\n  gather_facts: false\n  tasks:\n{tasks}")
        pyinfra = root / f"pyinfra_{count}.py"
        pyinfra.write_text(
            "from pyinfra.operations import server\n"
            f"for i in range({count}):\n"
            "    server.shell(name=f't{i}', commands=['true'])\n"
        )
        files.update({f"rigger_{count}": rigger, f"ansible_{count}": ansible, f"pyinfra_{count}": pyinfra})
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    opts = parser.parse_args()
    ansible_bin, pyinfra_bin = tool_venv("ansible"), tool_venv("pyinfra")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = write_workloads(root, opts.tasks)
        ansible_env = {
            "ANSIBLE_HOST_KEY_CHECKING": "False",
            "ANSIBLE_LOCAL_TEMP": str(root / "ansible-tmp"),
            "ANSIBLE_NOCOLOR": "1",
        }
        cases = []
        for count in ("1", str(opts.tasks)):
            cases += [
                Case(
                    "rigger",
                    count,
                    lambda c=count: timed(
                        [*rigger_command(), "run", str(files[f"rigger_{c}"])], {"PYTHONPATH": str(REPO)}
                    ),
                ),
                Case(
                    "ansible",
                    count,
                    lambda c=count: timed(
                        [
                            str(ansible_bin / "ansible-playbook"),
                            "-i",
                            "localhost,",
                            "-c",
                            "local",
                            "-e",
                            f"ansible_python_interpreter={ansible_bin / 'python'}",
                            str(files[f"ansible_{c}"]),
                        ],
                        ansible_env,
                    ),
                ),
                Case(
                    "pyinfra",
                    count,
                    lambda c=count: timed(
                        [str(pyinfra_bin / "pyinfra"), "-y", "@local", str(files[f"pyinfra_{c}"])], cwd=root
                    ),
                ),
            ]
        times = interleaved(cases, opts.repeats)
    overhead = report_per_task(
        times,
        ["rigger", "ansible", "pyinfra"],
        opts.tasks,
        f"local connection, {opts.tasks} x `true`, median of {opts.repeats}",
    )
    print(
        f"\nrigger per-task overhead is {overhead['ansible'] / overhead['rigger']:.0f}x below ansible-core "
        f"and {overhead['pyinfra'] / overhead['rigger']:.1f}x below pyinfra"
    )


if __name__ == "__main__":
    main()

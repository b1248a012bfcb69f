"""The real entry point, `python -m engine.cli`, in a process of its own: the exit code a
shell sees and nothing but the message on stderr (no traceback) for each kind of outcome,
and the same answer from the in-process runs the rest of the suite relies on
(tests/fakes/cli_in_process.py).

Real: the interpreter, the CLI, the local connection (one command), files in a temporary
directory. Nothing is faked. Ctrl-C (exit 99) has its own test: test_interrupt.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine import __version__
from tests.conftest import RiggerRun, run_rigger, run_rigger_process

FAILING = "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - name: fails\n      command: 'false'\n"
BROKEN = "- hosts: localhost\n  tasks:\n    - name: dup\n      command: echo a\n      command: echo b\n"
VALID = "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - debug: {msg: hi}\n"

# name -> (files to write, argv (FILE = the first file), exit code, text stdout or stderr must hold)
CASES = {
    "version": ({}, ["--version"], 0, f"rigger, version {__version__}"),
    "failed task": ({"p.yml": FAILING}, ["run", "FILE"], 2, "failed=1"),
    "broken playbook": ({"p.yml": BROKEN}, ["validate", "FILE"], 4, "p.yml:5"),
    "bad option": ({"p.yml": VALID}, ["run", "FILE", "--forks", "0"], 5, "--forks"),
    "no such module": ({}, ["doc", "write_fiel"], 5, "did you mean 'write_file'"),
}


def _timeless(text: str) -> str:
    return re.sub(r"\d+\.\d+s\b", "Ts", text)


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_exit_codes_and_output_as_a_shell_sees_them(case: str, tmp_path: Path) -> None:
    files, argv, code, shown = CASES[case]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    args = [str(tmp_path / next(iter(files))) if arg == "FILE" else arg for arg in argv]
    process = run_rigger_process(*args, cwd=tmp_path, timeout_s=120)
    assert process.rc == code, process.stdout + process.stderr
    assert shown in process.stdout + process.stderr
    assert "Traceback" not in process.stderr
    here: RiggerRun = run_rigger(*args, cwd=tmp_path, timeout_s=120)
    assert (here.rc, _timeless(here.stdout), here.stderr) == (code, _timeless(process.stdout), process.stderr)

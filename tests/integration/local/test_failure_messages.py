"""A failure of a connection, of the run lock or of the state directory names its real
cause and what to do, with no traceback.

Real: the rigger CLI, each run a process of its own (paramiko's transport thread writes
to the process's stderr, which only a process of its own shows); a TCP listener on a
port the kernel chose that answers garbage instead of SSH; the local connection, sudo's
absence (PATH without it: the command rigger runs is `sudo`); the user `nobody` (a real
setuid process through setpriv) with a HOME it cannot write. Not real: nothing.
"""

from __future__ import annotations

import socket
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_in_process import run_cli_process
from unprivileged import nobody_owns, run_as_nobody, visible_dir

PLAY = """\
- hosts: {hosts}
  gather_facts: false
  tasks:
    - name: a task
      {task}
"""


def playbook(folder: Path, hosts: str, task: str) -> Path:
    path = folder / "site.yml"
    path.write_text(PLAY.format(hosts=hosts, task=task))
    path.chmod(0o644)
    return path


@pytest.fixture
def not_ssh() -> Iterator[int]:
    """A port (the kernel's choice) where something answers, but not SSH."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def answer() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\nnot ssh\r\n")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join()
    server.close()


@pytest.fixture
def folder() -> Iterator[Path]:
    with visible_dir() as path:
        yield path


def test_a_port_that_is_not_ssh_is_unreachable_in_one_line(tmp_path: Path, not_ssh: int) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"[gpus]\nbox ansible_host=127.0.0.1 ansible_port={not_ssh} ansible_user=root\n")
    book = playbook(tmp_path, "gpus", 'command: "true"')
    done = run_cli_process(["run", "-i", str(inventory), str(book)], cwd=tmp_path, env={}, timeout_s=60)
    assert done.rc == 3, done.stdout + done.stderr
    assert f"127.0.0.1:{not_ssh}: SSH handshake failed: the port did not answer as SSH" in done.stdout, done.stdout
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert "paramiko" not in done.stderr, done.stderr


def test_become_without_sudo_says_sudo_is_not_installed(folder: Path) -> None:
    empty_path = nobody_owns(folder / "bin", 0o755)  # a PATH with no sudo in it
    home = nobody_owns(folder / "home")
    book = playbook(folder, "localhost", "become: true\n      stat:\n        path: /etc/hostname")
    done = run_as_nobody(["run", str(book)], cwd=folder, env={"HOME": str(home), "PATH": str(empty_path)})
    assert done.rc == 2, done.stdout + done.stderr
    assert "become failed on localhost: sudo is not installed on the host" in done.stdout, done.stdout
    assert "python3: No such file" not in done.stdout and "gave no result" not in done.stdout, done.stdout
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.parametrize(("home", "errno_name"), [("read-only", "EACCES"), ("missing", "EACCES")])
def test_a_home_rigger_cannot_write_names_the_directory_and_rigger_state_dir(
    folder: Path, home: str, errno_name: str
) -> None:
    """Without RIGGER_STATE_DIR the run lock lives under HOME; nobody cannot make it."""
    path = nobody_owns(folder / "home", 0o500) if home == "read-only" else folder / "no-such-home"
    book = playbook(folder, "localhost", 'command: "true"')
    done = run_as_nobody(["run", str(book)], cwd=folder, env={"HOME": str(path)}, drop=["RIGGER_STATE_DIR"])
    assert done.rc == 3, done.stdout + done.stderr
    message = textwrap.dedent(done.stdout)
    assert f"cannot make or open the state directory {path}/.cache/rigger" in message, message
    assert f"({errno_name})" in message and "set RIGGER_STATE_DIR" in message, message
    assert "Traceback" not in done.stdout + done.stderr


def test_a_run_lock_holder_whose_python_fails_says_why_without_its_traceback(tmp_path: Path) -> None:
    """The holder is the connection's python; one that fails at start (here a wrapper that
    raises, as a python under a HOME it cannot read does) is named by its exception."""
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\nexec python3 -c "
        '\'def load(): raise PermissionError(13, "Permission denied", "/h/.local")\nload()\'\n'
    )
    python.chmod(0o755)
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"localhost ansible_connection=local ansible_python_interpreter={python}\n")
    book = playbook(tmp_path, "localhost", 'command: "true"')
    done = run_cli_process(["run", "-i", str(inventory), str(book)], cwd=tmp_path, env={}, timeout_s=60)
    assert done.rc == 3, done.stdout + done.stderr
    said = "the run-lock holder did not start: PermissionError: [Errno 13] Permission denied: '/h/.local'"
    assert said in done.stdout and "ansible_python_interpreter" in done.stdout, done.stdout
    assert "Traceback" not in done.stdout + done.stderr

"""Real playbooks through the real CLI over real SSH to several 127.0.0.x hosts.

Real: the rigger CLI in a subprocess, the engine, paramiko, Debian's sshd answering on
127.0.0.2-127.0.0.5 (four inventory hosts), files on the "hosts" (this machine, written by
the SSH user). An unreachable host is a closed port; a dying host is an sshd we SIGKILL.
"""

from __future__ import annotations

import shutil
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import sshlab
from child_processes import STACKS_ON_ABORT, as_a_terminal_starts_it, output_of_stopped
from sshlab import Lab

pytestmark = pytest.mark.slow
HOSTS = {"gpu1": "127.0.0.2", "gpu2": "127.0.0.3", "gpu3": "127.0.0.4", "gpu4": "127.0.0.5"}


@pytest.fixture
def remote_tree() -> Iterator[Path]:
    """A directory the SSH user owns (pytest's tmp_path is root-only)."""
    tree = Path(tempfile.mkdtemp(prefix="rigger-ssh-e2e-", dir="/tmp"))
    shutil.chown(tree, sshlab.USER_NOPASSWD, sshlab.USER_NOPASSWD)
    try:
        yield tree
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def inventory(lab: Lab, path: Path, extra_hosts: str = "") -> Path:
    hosts = "".join(f"    {name}: {{ansible_host: {addr}}}\n" for name, addr in HOSTS.items())
    path.write_text(
        "all:\n"
        "  vars:\n"
        f"    ansible_user: {sshlab.USER_NOPASSWD}\n"
        f"    ansible_port: {lab.sshd.port}\n"
        f"    ansible_ssh_private_key_file: {lab.client_key}\n"
        f"    known_hosts_file: {lab.known_hosts}\n"
        "    ssh_connect_timeout_s: 3\n"
        "  hosts:\n" + hosts + extra_hosts
    )
    return path


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def _own(tree: Path) -> None:
    for path in [tree, *tree.rglob("*")]:
        shutil.chown(path, sshlab.USER_NOPASSWD, sshlab.USER_NOPASSWD)


@pytest.fixture
def site(lab: Lab, tmp_path: Path, remote_tree: Path) -> tuple[Path, Path, Path]:
    for name in HOSTS:
        (remote_tree / name / "old-weights").mkdir(parents=True)
        (remote_tree / name / "old-weights" / "a.safetensors").write_bytes(b"x" * 4096)
        (remote_tree / name / "config.json").write_text('{"kv": "fp8"}\n')
    _own(remote_tree)
    book = write(
        tmp_path / "site.yml",
        f"""\
        - hosts: all
          vars:
            dir: "{remote_tree}/{{{{ inventory_hostname }}}}"
          tasks:
            - name: facts came over ssh
              assert:
                that: ["facts.user == 'rigger-ssh'"]
            - name: config
              write_file:
                path: "{{{{ dir }}}}/config.json"
                content: "kv: auto\\n"
                mode: "0600"
              notify: config changed
            - name: motd
              write_file:
                path: "{{{{ dir }}}}/motd"
                content: "hello from {{{{ inventory_hostname }}}}\\n"
            - name: old weights
              ensure_absent:
                path: "{{{{ dir }}}}/old-weights"
            - name: marker
              command:
                cmd: touch {{{{ dir }}}}/marker
                creates: "{{{{ dir }}}}/marker"
          handlers:
            - name: config changed
              command: touch {{{{ dir }}}}/handler-ran
        """,
    )
    return book, inventory(lab, tmp_path / "hosts.yml"), remote_tree


def test_fleet_run_changes_then_changes_nothing(rigger, site) -> None:  # type: ignore[no-untyped-def]
    book, inv, tree = site
    first = rigger("run", str(book), "-i", str(inv), "--output", "jsonl")
    assert first.rc == 0, first.stdout[-3000:] + first.stderr[-3000:]
    for name in HOSTS:
        assert first.recap[name]["changed"] == 5, first.recap  # 4 tasks + handler
        assert (tree / name / "config.json").read_text() == "kv: auto\n"
        assert oct((tree / name / "config.json").stat().st_mode & 0o777) == "0o600"
        assert (tree / name / "motd").read_text() == f"hello from {name}\n"
        assert (tree / name / "handler-ran").exists()
        assert not (tree / name / "old-weights").exists()
    second = rigger("run", str(book), "-i", str(inv), "--output", "jsonl")
    assert second.rc == 0, second.stdout[-3000:]
    assert second.totals("changed") == 0, second.recap


def test_check_mode_over_ssh_touches_nothing(rigger, site, digest) -> None:  # type: ignore[no-untyped-def]
    book, inv, tree = site
    before = digest(tree)
    run = rigger("run", str(book), "-i", str(inv), "--check", "--diff", "--output", "jsonl")
    assert run.rc == 0, run.stdout[-3000:]
    assert digest(tree) == before
    assert {r["status"] for r in run.results("config")} == {"changed"}
    assert len(run.results("config")) == len(HOSTS)


def test_unreachable_host_exits_3_while_the_others_finish(rigger, lab, site) -> None:  # type: ignore[no-untyped-def]
    book, _, tree = site
    closed_port = sshlab.free_port(["127.0.0.8"])
    inv = inventory(
        lab,
        book.parent / "with-dead.yml",
        f"    dead1: {{ansible_host: 127.0.0.8, ansible_port: {closed_port}}}\n",
    )
    run = rigger("run", str(book), "-i", str(inv), "--output", "jsonl")
    assert run.rc == 3, run.stdout[-3000:]
    assert run.recap["dead1"]["unreachable"] == 1
    assert "connection refused" in " ".join(r.get("msg", "") for r in run.results() if r["host"] == "dead1")
    for name in HOSTS:
        assert run.recap[name]["failed"] == 0 and run.recap[name]["changed"] == 5
        assert (tree / name / "motd").exists()


def test_host_dying_mid_run_is_unreachable_and_the_rest_continue(  # type: ignore[no-untyped-def]
    rigger, lab, tmp_path, remote_tree
) -> None:
    doomed = sshlab.start_sshd(tmp_path, "doomed", ["127.0.0.14"])
    with lab.known_hosts.open("a") as handle:
        handle.write(doomed.known_hosts_lines())
    inv = inventory(
        lab,
        tmp_path / "hosts.yml",
        f"    doomed1: {{ansible_host: 127.0.0.14, ansible_port: {doomed.port}}}\n",
    )
    book = write(
        tmp_path / "p.yml",
        f"""\
        - hosts: all
          gather_facts: false
          tasks:
            - command: sleep 3
            - command: touch {remote_tree}/after-{{{{ inventory_hostname }}}}
        """,
    )
    killer = threading.Timer(1.5, doomed.kill_all)
    killer.start()
    try:
        run = rigger("run", str(book), "-i", str(inv), "--output", "jsonl", timeout_s=60)
    finally:
        killer.cancel()
        doomed.stop()
    assert run.rc == 3, run.stdout[-3000:]
    assert run.recap["doomed1"]["unreachable"] == 1
    assert not (remote_tree / "after-doomed1").exists()
    for name in HOSTS:
        assert (remote_tree / f"after-{name}").exists()


def _order_book(path: Path, log: Path, play_extra: str, fail_on: tuple[str, ...] = ()) -> Path:
    failing = "[" + ", ".join(repr(h) for h in fail_on) + "]"
    return write(
        path,
        f"""\
        - hosts: all
          gather_facts: false
          {play_extra}
          tasks:
            - name: one
              command: sh -c "echo {{{{ inventory_hostname }}}} one >> {log}"
            - name: maybe fail
              command: "false"
              when: inventory_hostname in {failing}
            - name: two
              command: sh -c "echo {{{{ inventory_hostname }}}} two >> {log}"
        """,
    )


def test_serial_batches_finish_before_the_next_batch_starts(  # type: ignore[no-untyped-def]
    rigger, lab, tmp_path, remote_tree
) -> None:
    log = remote_tree / "order.log"
    book = _order_book(tmp_path / "p.yml", log, "serial: [1, 2, '50%']")
    run = rigger("run", str(book), "-i", str(inventory(lab, tmp_path / "h.yml")), "--output", "jsonl")
    assert run.rc == 0, run.stdout[-3000:]
    lines = log.read_text().split("\n")[:-1]
    batches = [{"gpu1"}, {"gpu2", "gpu3"}, {"gpu4"}]
    position = 0
    for batch in batches:
        chunk = lines[position : position + 2 * len(batch)]
        assert {line.split()[0] for line in chunk} == batch, lines
        assert [line.split()[1] for line in chunk] == ["one"] * len(batch) + ["two"] * len(batch)
        position += 2 * len(batch)


@pytest.mark.parametrize(
    ("failing", "stops"),
    [(("gpu1",), False), (("gpu1", "gpu2"), True)],
    ids=["25%-equal-continues", "50%-exceeds-stops"],
)
def test_max_fail_percentage_boundary(  # type: ignore[no-untyped-def]
    rigger, lab, tmp_path, remote_tree, failing, stops
) -> None:
    log = remote_tree / "order.log"
    book = _order_book(tmp_path / "p.yml", log, "max_fail_percentage: 25", failing)
    run = rigger("run", str(book), "-i", str(inventory(lab, tmp_path / "h.yml")), "--output", "jsonl")
    assert run.rc == 2, run.stdout[-3000:]
    ran_two = {line.split()[0] for line in log.read_text().splitlines() if line.endswith(" two")}
    healthy = set(HOSTS) - set(failing)
    assert ran_two == (set() if stops else healthy)


def test_become_in_a_playbook_over_ssh(rigger, lab, tmp_path, remote_tree) -> None:  # type: ignore[no-untyped-def]
    """become: root-owned file written through sudo on two hosts; a user without a sudo
    rule fails that task at once (FAILED, exit 2), and the run never hangs on a prompt."""
    target = Path(tempfile.mkdtemp(prefix="rigger-ssh-root-", dir="/tmp"))
    target.chmod(0o755)  # root-owned: the SSH user cannot write here without become
    try:
        inv = inventory(
            lab,
            tmp_path / "hosts.yml",
            f"    nosudo1: {{ansible_host: 127.0.0.2, ansible_user: {sshlab.USER_NOSUDO}}}\n",
        )
        book = write(
            tmp_path / "p.yml",
            f"""\
            - hosts: gpu1:gpu2:nosudo1
              gather_facts: false
              tasks:
                - name: root file
                  become: true
                  write_file:
                    path: "{target}/{{{{ inventory_hostname }}}}.conf"
                    content: "owned by root\\n"
                    mode: "0600"
            """,
        )
        run = rigger("run", str(book), "-i", str(inv), "--output", "jsonl", timeout_s=60)
        assert run.rc == 2, run.stdout[-3000:]
        for name in ("gpu1", "gpu2"):
            written = target / f"{name}.conf"
            assert written.read_text() == "owned by root\n"
            assert written.stat().st_uid == 0
        (failed,) = [r for r in run.results("root file") if r["host"] == "nosudo1"]
        assert failed["status"] == "failed" and "password is required" in failed["msg"]
        assert run.recap["nosudo1"]["unreachable"] == 0
        again = rigger("run", str(book), "-i", str(inv), "--output", "jsonl", "--limit", "gpu1:gpu2")
        assert again.rc == 0 and again.totals("changed") == 0, again.stdout[-2000:]
    finally:
        shutil.rmtree(target, ignore_errors=True)


def test_unknown_host_key_in_a_playbook_is_unreachable_with_its_fingerprint(  # type: ignore[no-untyped-def]
    rigger, lab, tmp_path
) -> None:
    empty_known = tmp_path / "empty_known_hosts"
    empty_known.write_text("")
    inv = inventory(lab, tmp_path / "hosts.yml")
    inv.write_text(inv.read_text().replace(str(lab.known_hosts), str(empty_known)))
    book = write(
        tmp_path / "p.yml",
        """\
        - hosts: gpu1
          gather_facts: false
          tasks:
            - command: "true"
        """,
    )
    run = rigger("run", str(book), "-i", str(inv), "--output", "jsonl")
    assert run.rc == 3, run.stdout[-2000:]
    (result,) = run.results()
    assert result["status"] == "unreachable"
    assert "unknown host key" in result["msg"] and lab.sshd.fingerprint() in result["msg"]
    inv.write_text(inv.read_text().replace("  vars:\n", "  vars:\n    host_key_checking: accept-new\n"))
    accepted = rigger("run", str(book), "-i", str(inv))
    assert accepted.rc == 0, accepted.stdout[-2000:]
    assert f"[127.0.0.2]:{lab.sshd.port} ssh-ed25519 " in empty_known.read_text()
    inv.write_text(inv.read_text().replace("    host_key_checking: accept-new\n", ""))
    strict_again = rigger("run", str(book), "-i", str(inv))
    assert strict_again.rc == 0, "the recorded key must satisfy strict checking"


def test_ctrl_c_ends_remote_commands_and_exits_99(lab, tmp_path, remote_tree) -> None:  # type: ignore[no-untyped-def]
    """SIGINT to a real `rigger run` over SSH: exit 99 soon, and the remote sleeps die
    with the closed connections (the remote python kills what it started)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    marker = f"rigger-ctrl-c-{os.getpid()}"
    book = write(
        tmp_path / "p.yml",
        f"""\
        - hosts: all
          gather_facts: false
          tasks:
            - command: {{argv: [sh, -c, "sleep 60; true", {marker}]}}
            - command: touch {remote_tree}/never-{{{{ inventory_hostname }}}}
        """,
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3]), **STACKS_ON_ABORT}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "run", str(book), "-i", str(inventory(lab, tmp_path / "h.yml"))],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        preexec_fn=as_a_terminal_starts_it,
    )
    deadline = time.monotonic() + 20
    while subprocess.run(["pgrep", "-c", "-f", marker], capture_output=True, text=True).stdout.strip() != "4":
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()[0][-2000:]
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    # bounded below the remote sleep's 60 s: a run that waited for its command fails with its stacks
    output, _ = output_of_stopped(proc, 45)
    assert proc.returncode == 99, output[-2000:]
    deadline = time.monotonic() + 5
    while subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "remote commands outlived the interrupted run"
        time.sleep(0.1)
    assert not list(remote_tree.glob("never-*"))


def test_ansible_become_in_the_inventory_is_the_default(rigger, lab, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Real sshd, real sudo: the login user is unprivileged; `ansible_become: true` in the
    inventory makes tasks run as root unless a task says `become: false`."""
    inv = inventory(lab, tmp_path / "hosts.yml")
    inv.write_text(inv.read_text().replace("  vars:\n", "  vars:\n    ansible_become: true\n", 1))
    book = write(
        tmp_path / "p.yml",
        """\
        - hosts: gpu1
          gather_facts: false
          tasks:
            - name: inherits become
              command: id -u
              register: inherited
            - name: turns it off
              command: id -u
              become: false
              register: plain
        """,
    )
    run = rigger("run", str(book), "-i", str(inv), "--output", "jsonl")
    assert run.rc == 0, run.stdout[-2000:]
    uids = {r["task"]: r["data"]["stdout"].strip() for r in run.results()}
    assert uids["inherits become"] == "0"
    assert uids["turns it off"] != "0"

"""Host selection caught before anything runs, and `-i HOST,` host lists (issue 30).

Real: the rigger CLI and the inventory loader on real files under tmp_path; nothing is
mocked and no host is contacted (every play here is skipped or runs `debug` on the local
connection). ansible-core 2.19.14 on the same inventory printed "[WARNING]: Could not match
supplied host pattern, ignoring: gpu" and "skipping: no hosts matched" (exit 0), and for
`--limit kimi_server` the same warning, then "Specified inventory, host pattern and/or
--limit leaves us with no hosts to target." (exit 1); `-i a:2222,b` lists hosts a and b.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.inventory import inline_hosts, load_inventory, select_hosts

NO_LOCK = ("-e", "rigger_run_lock=false")
INVENTORY = "[gpus]\ngpu01\ngpu02\n[kimi_servers]\nk1\n[empty]\n"


@pytest.mark.parametrize(
    ("source", "hosts", "ports"),
    [
        ("localhost,", ["localhost"], {}),
        ("gpu01,gpu02", ["gpu01", "gpu02"], {}),
        (" a:2222 , b ,", ["a", "b"], {"a": 2222}),
        ("10.0.0.1,[::1]:2200", ["10.0.0.1", "::1"], {"::1": 2200}),
    ],
)
def test_a_comma_in_a_missing_path_is_an_inline_host_list(
    tmp_path: Path, monkeypatch: Any, source: str, hosts: list[str], ports: dict[str, int]
) -> None:
    monkeypatch.chdir(tmp_path)
    inventory = load_inventory([source])
    assert list(inventory.hosts) == hosts
    assert select_hosts(inventory, "ungrouped") == hosts
    assert {
        h: inventory.hosts[h].vars["ansible_port"] for h in hosts if "ansible_port" in inventory.hosts[h].vars
    } == ports


def test_an_existing_file_with_a_comma_is_read_as_a_file(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a,b").write_text("[g]\nreal\n")
    assert inline_hosts("a,b") is None and list(load_inventory(["a,b"]).hosts) == ["real"]
    assert inline_hosts("hosts.ini") is None


def test_inline_localhost_runs_and_plans_and_applies(tmp_path: Path, rigger: Any) -> None:
    book = tmp_path / "site.yml"
    book.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - debug: msg=hi\n")
    run = rigger("run", "-i", "localhost,", str(book), "--output", "jsonl", *NO_LOCK, cwd=tmp_path)
    assert run.rc == 0 and [(r["host"], r["status"]) for r in run.results()] == [("localhost", "ok")]
    plan = tmp_path / "p.plan"
    assert rigger("plan", "-i", "localhost,", str(book), "-o", str(plan), cwd=tmp_path).rc == 0
    assert rigger("apply", str(plan), cwd=tmp_path).rc == 0


def _files(tmp_path: Path, hosts: str) -> tuple[Path, Path]:
    inventory = tmp_path / "hosts"
    inventory.write_text(INVENTORY)
    book = tmp_path / "site.yml"
    book.write_text(f"- hosts: {hosts}\n  gather_facts: false\n  tasks:\n    - debug: msg=hi\n")
    return inventory, book


@pytest.mark.parametrize(
    ("hosts", "warnings"),
    [
        ("gpu", ["play 'gpu': Could not match supplied host pattern, ignoring: gpu (did you mean 'gpus'?)",
                 "play 'gpu' targets no host (hosts: 'gpu')"]),
        ("'gpus:kimi_server'", ["ignoring: kimi_server (did you mean 'kimi_servers'?)"]),
        ("'gpus:!gpu0x'", ["ignoring: gpu0x (did you mean 'gpu0"]),
        ("empty", ["play 'empty' targets no host (hosts: 'empty')"]),  # a group: no mismatch warning
        ("gpus", []),
        ("'gpu*'", []),
        ("all", []),
        ("'{{ target }}'", []),  # templated: rendered and warned about when the play runs
    ],
)  # fmt: skip
def test_validate_warns_about_a_pattern_that_names_nothing(
    tmp_path: Path, rigger: Any, hosts: str, warnings: list[str]
) -> None:
    """Ansible warns and skips the play (exit 0); validate says so, visibly, with file:line."""
    inventory, book = _files(tmp_path, hosts)
    run = rigger("validate", str(book), "-i", str(inventory))
    assert run.rc == 0, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.startswith("[WARNING]")]
    assert len(lines) == len(warnings), run.stderr
    for line, expected in zip(lines, warnings, strict=True):
        assert line.startswith(f"[WARNING] {book}:1: ") and expected in line


def test_run_warns_before_the_first_play(tmp_path: Path, rigger: Any) -> None:
    inventory, book = _files(tmp_path, "gpu")
    run = rigger("run", str(book), "-i", str(inventory), "--output", "jsonl", *NO_LOCK)
    assert run.rc == 0
    kinds = [e["event"] for e in run.events]
    first_warning = next(e for e in run.events if e["event"] == "notice")
    assert kinds.index("notice") < kinds.index("play_start")
    assert "ignoring: gpu (did you mean 'gpus'?)" in first_warning["message"]


@pytest.mark.parametrize(
    ("limit", "rc", "expected"),
    [
        (
            "kimi_server",
            1,
            "leave no hosts to target\n[WARNING] Could not match supplied host pattern, ignoring: kimi_server "
            "(did you mean 'kimi_servers'?)",
        ),
        ("gpu01,gpu0x", 0, "--limit: Could not match supplied host pattern, ignoring: gpu0x (did you mean"),
        ("gpu01", 0, ""),
    ],
)
def test_a_limit_that_names_nothing_says_what_it_meant(
    tmp_path: Path, rigger: Any, limit: str, rc: int, expected: str
) -> None:
    inventory, book = _files(tmp_path, "all")
    run = rigger("run", str(book), "-i", str(inventory), "--limit", limit, "-c", "local", *NO_LOCK)
    assert run.rc == rc, run.stdout + run.stderr
    assert (expected in run.stdout + run.stderr) if expected else "Could not match" not in run.stdout + run.stderr

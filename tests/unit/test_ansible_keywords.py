"""Ansible keywords and ansible-playbook flags as Ansible users write them (issue 20).

Real: the rigger CLI on real playbook files, run on the local connection of this machine
(nothing is mocked; no host is contacted). What ansible-core 2.19 answers is checked in
tests/differential (play-keywords-templated, magic-connection-vars, real-deepops-config);
these are the refusals and the output shapes the differential suite cannot compare.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

NO_LOCK = ("-e", "rigger_run_lock=false")


def _write(tmp_path: Path, text: str) -> Path:
    book = tmp_path / "site.yml"
    book.write_text(text)
    return book


def test_play_vars_as_a_list_are_refused_as_ansible_refuses_them(tmp_path: Path, rigger: Any) -> None:
    book = _write(tmp_path, "- hosts: localhost\n  gather_facts: false\n  vars:\n    - a: 1\n  tasks: []\n")
    run = rigger("validate", str(book))
    assert run.rc == 4
    assert f"{book}:3: a play's vars must be a mapping" in run.stderr and "did you mean" not in run.stderr


def test_a_connection_rigger_lacks_is_refused_by_name(tmp_path: Path, rigger: Any) -> None:
    book = _write(tmp_path, "- hosts: localhost\n  tasks:\n    - command: 'true'\n      connection: docker\n")
    run = rigger("validate", str(book))
    assert run.rc == 4
    assert f"{book}:4: connection 'docker' is not a connection type rigger has" in run.stderr


def test_a_serial_that_renders_to_no_count_names_the_play(tmp_path: Path, rigger: Any) -> None:
    book = _write(tmp_path, "- hosts: localhost\n  serial: '{{ size }}'\n  gather_facts: false\n  tasks: []\n")
    run = rigger("run", str(book), "-e", "size=lots", *NO_LOCK)
    assert run.rc == 4 and f"{book}:1: play 'localhost': serial: 'lots' is neither" in run.stderr


def _three_tasks(tmp_path: Path) -> Path:
    return _write(
        tmp_path,
        "- hosts: localhost\n  gather_facts: false\n  tags: [p]\n  tasks:\n"
        + "".join(f"    - name: {n}\n      debug: {{msg: {n}}}\n      tags: [{n}]\n" for n in ("one", "two", "three")),
    )


def test_start_at_task_skips_what_comes_before_the_first_match(tmp_path: Path, rigger: Any) -> None:
    book = _three_tasks(tmp_path)
    run = rigger("run", str(book), "--start-at-task", "t*o", "--output", "jsonl", *NO_LOCK)
    assert run.rc == 0 and [r["task"] for r in run.results()] == ["two", "three"]
    missing = rigger("run", str(book), "--start-at-task", "nope", "--output", "jsonl", *NO_LOCK)
    notices = [e["message"] for e in missing.events if e["event"] == "notice"]
    assert notices == ["no task matches --start-at-task 'nope'"]
    # as Ansible's recap: a host that ran no task is not listed
    assert [e["hosts"] for e in missing.events if e["event"] == "recap"] == [{}]


def test_list_tasks_and_syntax_check_in_ansible_playbook_s_shape(tmp_path: Path, rigger: Any) -> None:
    book = _three_tasks(tmp_path)
    listed = rigger("run", str(book), "--list-tasks")
    assert listed.rc == 0
    assert listed.stdout == (
        f"\nplaybook: {book}\n\n  play #1 (localhost): localhost\tTAGS: [p]\n    tasks:\n"
        "      one\tTAGS: [one, p]\n      two\tTAGS: [p, two]\n      three\tTAGS: [p, three]\n"
    )
    checked = rigger("run", str(book), "--syntax-check")
    assert checked.rc == 0 and checked.stdout == f"\nplaybook: {book}\n"


def test_home_and_variables_in_path_arguments_are_expanded_on_the_host(tmp_path: Path, rigger: Any) -> None:
    """Issue 20: `path: ~/x` and `$HOME/x` are the user's home on the host (Ansible's
    type='path'), not a folder literally named `~` or `${HOME}` under the current one."""
    home = tmp_path / "home"
    home.mkdir()
    book = _write(
        tmp_path,
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - file: {path: '~/cache/models', state: directory}\n"
        "    - copy: {content: 'x', dest: '${HOME}/cache/models/readme'}\n"
        "    - stat: {path: '$HOME/cache/models/readme'}\n      register: st\n"
        "    - command: {cmd: ls, chdir: '~/cache/models'}\n      register: listed\n",
    )
    run = rigger("run", str(book), "--output", "jsonl", *NO_LOCK, cwd=tmp_path, env={"HOME": str(home)})
    assert run.rc == 0, run.stdout + run.stderr
    assert (home / "cache/models/readme").read_text() == "x"
    assert not (tmp_path / "~").exists() and not (tmp_path / "${HOME}").exists()
    assert [r["data"].get("stdout", "").strip() for r in run.results() if r["task"] == "command"] == ["readme"]


def test_connection_flag_is_below_the_host_s_own_variables(tmp_path: Path, rigger: Any) -> None:
    """`-c local` runs an inventory host on this machine, unless the host's own
    ansible_connection says otherwise (Ansible: variables win over the command line). The
    SSH address is 127.0.0.1 port 1: refused at once, so reaching it shows as unreachable."""
    hosts = tmp_path / "hosts"
    hosts.write_text(
        "gpu01 ansible_host=127.0.0.1 ansible_port=1\n"
        "gpu02 ansible_host=127.0.0.1 ansible_port=1 ansible_connection=ssh\n"
    )
    book = _write(tmp_path, "- hosts: all\n  gather_facts: false\n  tasks:\n    - command: 'true'\n")
    run = rigger("run", "-i", str(hosts), str(book), "-c", "local", "--output", "jsonl", *NO_LOCK)
    assert {r["host"]: r["status"] for r in run.results()} == {"gpu01": "changed", "gpu02": "unreachable"}
    plain = rigger("run", "-i", str(hosts), str(book), "--output", "jsonl", *NO_LOCK)
    assert {r["status"] for r in plain.results()} == {"unreachable"}


def test_list_hosts_renders_a_templated_hosts_keyword(tmp_path: Path, rigger: Any) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("[gpu]\ngpu01\n[cpu]\ncpu01\n")
    book = _write(tmp_path, "- hosts: \"{{ hostlist | default('all') }}\"\n  tasks: []\n")
    shown = rigger("run", "-i", str(hosts), str(book), "--list-hosts", "-e", "hostlist=gpu")
    assert shown.rc == 0
    assert "  play #1 (gpu): gpu\tTAGS: []\n    pattern: ['gpu']\n    hosts (1):\n      gpu01\n" in shown.stdout


def test_a_templated_role_name_renders_with_play_vars_or_names_its_line(tmp_path: Path, rigger: Any) -> None:
    (tmp_path / "roles/gpu_driver/tasks").mkdir(parents=True)
    (tmp_path / "roles/gpu_driver/tasks/main.yml").write_text("- name: in the role\n  debug: {msg: driver}\n")
    book = _write(
        tmp_path,
        "- hosts: localhost\n  gather_facts: false\n  vars: {which: gpu_driver}\n  roles:\n    - '{{ which }}'\n",
    )
    run = rigger("run", str(book), "--output", "jsonl", *NO_LOCK)
    assert run.rc == 0 and [r["task"] for r in run.results()] == ["gpu_driver : in the role"]
    book.write_text("- hosts: localhost\n  roles:\n    - '{{ unknown_role }}'\n")
    bad = rigger("validate", str(book))
    assert bad.rc == 4 and f"{book}:3: roles: undefined variable: 'unknown_role'" in bad.stderr


def test_ask_become_pass_prompts_and_the_password_never_reaches_output(tmp_path: Path) -> None:
    """-K: the real CLI (click's runner feeds the prompt); the password becomes the run's
    ansible_become_password and is printed nowhere."""
    from click.testing import CliRunner

    from engine.cli import cli

    book = _write(tmp_path, "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - debug: {msg: hello}\n")
    result = CliRunner().invoke(cli, ["run", str(book), "-K", "--output", "jsonl", *NO_LOCK], input="pw-s3cret\n")
    assert result.exit_code == 0, result.output
    assert "BECOME password" in result.output and "pw-s3cret" not in result.output


@pytest.mark.parametrize(
    ("text", "line", "where"),
    [
        ("- hosts: localhost\n  timeout: 5\n  tasks: []\n", 2, "`timeout` on a play"),
        ("- hosts: localhost\n  tasks:\n    - debug: msg=x\n      remote_user: bob\n", 4, "`remote_user` on a task"),
        (
            "- hosts: localhost\n  tasks:\n    - block:\n        - debug: msg=x\n      remote_user: ops\n",
            5,
            "`remote_user` on a block",
        ),
    ],
)
def test_an_ansible_keyword_rigger_lacks_is_named_as_one(
    tmp_path: Path, rigger: Any, text: str, line: int, where: str
) -> None:
    """Never "unknown module or task keyword ... did you mean": Ansible has the keyword."""
    book = _write(tmp_path, text)
    run = rigger("validate", str(book))
    assert run.rc == 4 and f"{book}:{line}: {where} is not supported by rigger" in run.stderr
    assert "did you mean" not in run.stderr and "unknown" not in run.stderr


@pytest.mark.parametrize(
    "keyword",
    [
        "any_errors_fatal: '{{ any_errors_fatal | default(true) }}'",
        "max_fail_percentage: '{{ fail_pct | default(20) }}'",
        "gather_facts: '{{ facts | default(false) }}'",
        "become: '{{ use_become | default(false) }}'",
        "no_log: '{{ quiet | default(false) }}'",
        "serial: '{{ batch | default(1) }}'",
    ],
)
def test_a_templated_play_keyword_is_valid_and_renders_at_run_time(tmp_path: Path, rigger: Any, keyword: str) -> None:
    """Ansible renders these when the play runs; validate must not call the template 'not of type'."""
    book = _write(tmp_path, f"- hosts: localhost\n  {keyword}\n  tasks:\n    - debug: {{msg: hi}}\n")
    checked = rigger("validate", str(book))
    assert checked.rc == 0, checked.stderr


@pytest.mark.parametrize(
    ("keyword", "said"),
    [
        ("any_errors_fatal: '{{ flag }}'", "any_errors_fatal: 'lots' is not a boolean"),
        ("max_fail_percentage: '{{ flag }}'", "max_fail_percentage: 'lots' is not a number from 0 to 100"),
    ],
)
def test_a_templated_play_keyword_of_the_wrong_type_names_the_play(
    tmp_path: Path, rigger: Any, keyword: str, said: str
) -> None:
    book = _write(tmp_path, f"- hosts: localhost\n  gather_facts: false\n  {keyword}\n  tasks: []\n")
    run = rigger("run", str(book), "-e", "flag=lots", *NO_LOCK)
    assert run.rc == 4 and f"{book}:1: play 'localhost': {said}" in run.stderr


@pytest.mark.parametrize(
    ("keywords", "rc", "said"),
    [
        # real retries: until never holds, so both attempts run and the count is registered
        ("retries: '{{ tries }}'\n      delay: '{{ wait }}'", 2, "until not met after 2 attempts"),
        ("retries: '{{ wait }}x'\n      delay: 0", 2, "retries: '0x' is not a whole number of 0 or more"),
        ("retries: 1\n      delay: '{{ -1 }}'", 2, "delay: -1 is not a number of seconds of 0 or more"),
        ("timeout: '{{ tries }}'\n      retries: 0", 2, "until not met after 1 attempts"),
    ],
)
def test_templated_task_numbers_render_when_the_task_runs(
    tmp_path: Path, rigger: Any, keywords: str, rc: int, said: str
) -> None:
    """Real: a command on the local connection. Ansible renders retries/delay/timeout per task."""
    book = _write(
        tmp_path,
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - command: 'true'\n"
        f"      register: r\n      until: false\n      {keywords}\n",
    )
    assert rigger("validate", str(book)).rc == 0
    run = rigger("run", str(book), "-e", "tries=1", "-e", "wait=0", *NO_LOCK)
    assert run.rc == rc and said in run.stdout + run.stderr


def test_async_with_a_poll_is_the_task_s_time_limit_as_in_ansible(tmp_path: Path, rigger: Any) -> None:
    """ansible-core 2.19.14 on this playbook: "async task did not complete within the requested
    time - 1s", and the command is gone (its async wrapper kills it). The in-process CLI harness
    fails a run that leaves a process it started running, so the slow run's shell is proven gone."""
    marker = tmp_path / "finished"
    book = _write(
        tmp_path,
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        f"    - shell: sleep 3 && touch {marker}\n      async: 1\n      poll: 1\n"
        "    - command: 'true'\n      async: 30\n      timeout: 20\n      register: quick\n",
    )
    run = rigger("run", "-i", "localhost,", str(book), *NO_LOCK)
    assert run.rc == 2 and "timed out after 1s" in run.stdout, run.stdout + run.stderr
    quick = _write(tmp_path, book.read_text().replace("sleep 3", "true"))
    assert rigger("run", "-i", "localhost,", str(quick), *NO_LOCK).rc == 0
    assert marker.exists()  # async within its limit changes nothing


def test_meta_clear_facts_forgets_gathered_facts_and_keeps_set_fact(tmp_path: Path, rigger: Any) -> None:
    """ansible-core 2.19.14 printed "0 gone 1" for this play."""
    book = _write(
        tmp_path,
        "- hosts: localhost\n  gather_facts: true\n  gather_subset: [min]\n  tasks:\n"
        "    - set_fact: {mine: 1}\n    - meta: clear_facts\n"
        "    - debug: {msg: \"{{ ansible_facts | length }} {{ ansible_hostname | default('gone') }} {{ mine }}\"}\n",
    )
    run = rigger("run", "-i", "localhost,", str(book), *NO_LOCK)
    assert run.rc == 0 and "ok: [localhost]: 0 gone 1" in run.stdout, run.stdout + run.stderr


def test_meta_end_batch_ends_each_serial_batch_and_not_the_next_play(tmp_path: Path, rigger: Any) -> None:
    """ansible-core 2.19.14 printed "first a", "first b", "next play a", "next play b"."""
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("a ansible_connection=local\nb ansible_connection=local\n")
    book = _write(
        tmp_path,
        "- hosts: all\n  gather_facts: false\n  serial: 1\n  tasks:\n"
        "    - debug: {msg: 'first {{ inventory_hostname }}'}\n    - meta: end_batch\n"
        "    - debug: {msg: 'second {{ inventory_hostname }}'}\n"
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - debug: {msg: 'next play {{ inventory_hostname }}'}\n",
    )
    run = rigger("run", "-i", str(inventory), str(book), *NO_LOCK)
    shown = [line.split("]: ", 1)[1] for line in run.stdout.splitlines() if line.startswith("ok: [")]
    assert shown == ["first a", "first b", "next play a", "next play b"], run.stdout + run.stderr

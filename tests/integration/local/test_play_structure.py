"""Play structure and semantics give ansible-core's answers (roles, imports, includes, meta,
run_once, delegate_to, loops, handlers).

Real: the rigger CLI (in the test process), the local connection, real commands. The expected
values were recorded by running the same playbooks through ansible-core 2.19.14 (local
connection); each test says so where it pins one. The run lock is switched off
(``rigger_run_lock=false``) because other runs on this machine may hold the local lock.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, RiggerRun, run_rigger

CASES = REPO / "tests" / "differential" / "cases"
NO_LOCK = ["-e", "rigger_run_lock=false"]
LOCAL = ["-e", "ansible_connection=local", *NO_LOCK, "--output", "jsonl"]


def _run(playbook: Path, inventory: Path, *extra: str) -> RiggerRun:
    return run_rigger("run", str(playbook), "-i", str(inventory), *LOCAL, *extra, cwd=playbook.parent)


def _messages(run: RiggerRun, host: str) -> list[str]:
    return [r["msg"] for r in run.results() if r["host"] == host and r["status"] == "ok" and r.get("msg")]


def _counts(run: RiggerRun, host: str) -> tuple[int, int, int, int]:
    stats = run.recap[host]
    return stats["ok"], stats["changed"], stats["skipped"], stats["failed"]


def test_roles_imports_and_includes_as_ansible_runs_them():
    """Role defaults < play vars < public role vars; a dependency's params are its own; a
    role listed twice with the same params runs once; import_role's when applies to each
    task; include_tasks loops once per item; includes count as ok (ansible-core 2.19.14)."""
    case = CASES / "roles-includes"
    run = _run(case / "site.yml", case / "hosts")
    assert run.rc == 0, run.stdout + run.stderr
    msgs = _messages(run, "h1")
    assert msgs[:4] == [
        "dep from_meta dd",
        "base 80 rolevar dep_default_value base base nop",
        "extra rolevar",
        "web 8080 9090",
    ]
    assert "after rolevar 8080 80" in msgs
    assert [m for m in msgs if m.startswith("inc ")] == ["inc 1 x", "inc 2 x", "inc none given"]
    assert [m for m in msgs if m.startswith("web ")] == ["web 8080 9090", "web 8080 80", "web 8080 7"]
    assert "handler ran" in msgs
    assert _counts(run, "h1") == (17, 1, 1, 0)
    assert _counts(run, "h2") == (16, 1, 2, 0)


def test_meta_run_once_delegate_and_loops(tmp_path):
    """end_host stops one host; run_once shares set_fact and register with the batch but
    counts on one host; end_play ends the play, not the playbook; a delegated command
    still renders the original host's variables; registered stdout has no trailing
    newline and has stderr_lines; set_fact in a loop sees earlier items; a loop counts
    once in the recap (all pinned from ansible-core 2.19.14)."""
    (tmp_path / "hosts").write_text("h1\nh2\n")
    (tmp_path / "p.yml").write_text(
        """
- hosts: all
  gather_facts: false
  tasks:
    - debug: msg=one
    - meta: end_host
      when: inventory_hostname == 'h2'
    - debug: msg=two
- hosts: all
  gather_facts: false
  tasks:
    - name: once
      set_fact: picked="{{ inventory_hostname }}"
      run_once: true
    - name: once registered
      command: echo hi
      run_once: true
      register: r
    - name: show
      debug: msg="{{ picked }} {{ r.stdout }}"
    - meta: end_play
    - debug: msg=never
- hosts: all
  gather_facts: false
  tasks:
    - name: delegated
      ansible.builtin.command: echo {{ inventory_hostname }}
      delegate_to: h2
      register: d
    - debug: msg="{{ d.stdout }} {{ d.stdout_lines }} {{ d.stderr_lines }}"
    - name: set in loop
      set_fact:
        acc: "{{ (acc | default([])) + [item] }}"
      loop: [1, 2, 3]
    - ansible.legacy.debug: msg="{{ acc | join(',') }}"
"""
    )
    run = _run(tmp_path / "p.yml", tmp_path / "hosts")
    assert run.rc == 0, run.stdout + run.stderr
    assert _messages(run, "h1") == ["one", "two", "h1 hi", "h1 ['h1'] []", "1,2,3"]
    assert _messages(run, "h2") == ["one", "h1 hi", "h2 ['h2'] []", "1,2,3"]
    assert "never" not in run.stdout
    assert _counts(run, "h1") == (9, 2, 0, 0)
    assert _counts(run, "h2") == (6, 1, 0, 0)


def test_import_when_applies_to_each_task_include_when_once(tmp_path):
    """A when on import_tasks is checked for every imported task (the first one turns it
    false, so the second is skipped); on include_tasks it is checked once. A handler
    notified by a handler runs in the same flush (ansible-core 2.19.14: ok=9 changed=3
    skipped=1)."""
    (tmp_path / "hosts").write_text("h1\n")
    (tmp_path / "t.yml").write_text("- set_fact:\n    flag: false\n- debug:\n    msg: second\n")
    (tmp_path / "p.yml").write_text(
        """
- hosts: all
  gather_facts: false
  tasks:
    - set_fact:
        flag: true
    - import_tasks: t.yml
      when: flag
    - set_fact:
        flag: true
    - include_tasks: t.yml
      when: flag
    - command: "true"
      notify: first
  handlers:
    - name: second
      command: "true"
    - name: first
      command: "true"
      notify: second
"""
    )
    run = _run(tmp_path / "p.yml", tmp_path / "hosts")
    assert run.rc == 0, run.stdout + run.stderr
    assert [r["status"] for r in run.results("debug")] == ["skipped", "ok"]
    assert [r["task"] for r in run.results() if r["task"] in ("first", "second")] == ["first", "second"]
    assert _counts(run, "h1") == (9, 3, 1, 0)


def test_delegated_task_uses_the_delegated_hosts_connection(tmp_path):
    """h1 can only be reached over SSH at an address that answers nothing; a task
    delegated to 'ctl' (ansible_connection=local in the inventory) runs through ctl's
    connection, with h1's variables."""
    (tmp_path / "hosts").write_text(
        "h1 ansible_host=127.0.0.1 ansible_port=1 ansible_connection=ssh rigger_run_lock=false\n"
        "ctl ansible_connection=local rigger_run_lock=false\n"
    )
    marker = tmp_path / "made-by-h1"
    (tmp_path / "p.yml").write_text(
        f"""
- hosts: h1
  gather_facts: false
  tasks:
    - name: through ctl
      command: touch {tmp_path}/made-by-{{{{ inventory_hostname }}}}
      delegate_to: ctl
    - name: local action
      local_action: command touch {tmp_path}/local-marker
    - name: on h1 itself
      command: "true"
"""
    )
    run = run_rigger("run", str(tmp_path / "p.yml"), "-i", str(tmp_path / "hosts"), *NO_LOCK, "--output", "jsonl")
    assert marker.exists(), run.stdout + run.stderr
    assert [r["status"] for r in run.results("through ctl")] == ["changed"]
    assert (tmp_path / "local-marker").exists()  # local_action: delegate_to localhost
    assert [r["status"] for r in run.results("on h1 itself")] == ["unreachable"]
    assert run.rc == 3


def test_import_playbook_in_both_spellings(tmp_path):
    """(Play vars as a list were accepted here; ansible-core 2.19.14 refuses them, and so
    does rigger now: tests/unit/test_ansible_keywords.py.)"""
    (tmp_path / "hosts").write_text("h1\n")
    (tmp_path / "other.yml").write_text(
        '- hosts: all\n  gather_facts: false\n  vars:\n    a: 1\n    b: 2\n  tasks:\n    - debug: msg="{{ a + b }}"\n'
    )
    (tmp_path / "site.yml").write_text("- import_playbook: other.yml\n- ansible.builtin.import_playbook: other.yml\n")
    run = _run(tmp_path / "site.yml", tmp_path / "hosts")
    assert run.rc == 0, run.stdout + run.stderr
    assert _messages(run, "h1") == ["3", "3"]


def test_static_check_sees_into_roles_and_includes(tmp_path):
    """An undefined variable inside a role's tasks or an included file is reported before
    any host is touched, at its own file:line; the role's defaults define names."""
    role = tmp_path / "roles" / "r"
    (role / "tasks").mkdir(parents=True)
    (role / "defaults").mkdir()
    (role / "defaults" / "main.yml").write_text("known: 1\n")
    (role / "tasks" / "main.yml").write_text('- debug: msg="{{ known }}"\n- include_tasks: more.yml\n')
    (role / "tasks" / "more.yml").write_text('- debug:\n    msg: "{{ knwon }}"\n')
    (tmp_path / "p.yml").write_text("- hosts: localhost\n  gather_facts: false\n  roles: [r]\n")
    run = run_rigger("validate", str(tmp_path / "p.yml"), cwd=tmp_path)
    assert run.rc == 4, run.stdout + run.stderr
    assert f"{role}/tasks/more.yml:1:" in run.stderr
    assert "undefined variable 'knwon' (did you mean 'known'?)" in run.stderr
    assert "Traceback" not in run.stderr


def test_failed_hosts_leave_later_plays_and_a_failure_limit_ends_the_playbook(tmp_path):
    """h1 fails in play 1 and is not in play 2; in play 3 max_fail_percentage is judged
    over the hosts still in the play (1/2) and ends the playbook: play 4 never runs
    (ansible-core 2.19.14: h1 failed=1; h2 ok=1 failed=1 skipped=1; h3 ok=1 skipped=2)."""
    (tmp_path / "hosts").write_text("h1\nh2\nh3\n")
    (tmp_path / "p.yml").write_text(
        """
- hosts: all
  gather_facts: false
  tasks:
    - command: /bin/false
      when: inventory_hostname == 'h1'
- hosts: all
  gather_facts: false
  tasks:
    - debug: msg=second
- hosts: all
  gather_facts: false
  max_fail_percentage: 10
  tasks:
    - command: /bin/false
      when: inventory_hostname == 'h2'
    - debug: msg=third
- hosts: all
  gather_facts: false
  tasks:
    - debug: msg=fourth
"""
    )
    run = _run(tmp_path / "p.yml", tmp_path / "hosts")
    assert run.rc == 2, run.stdout + run.stderr
    assert _counts(run, "h1") == (0, 0, 0, 1)
    assert _counts(run, "h2") == (1, 0, 1, 1)
    assert _counts(run, "h3") == (1, 0, 2, 0)
    assert "fourth" not in run.stdout


def test_a_failed_run_once_task_takes_every_host_of_the_batch_out_of_ansible_play_hosts(tmp_path):
    """A run_once task fails on h1: its failure is every host's, so all three leave
    ansible_play_hosts (ansible-core 2.19.14 prints "always []"; it ran the always on h1
    only, where rigger runs it on all three: each must print the same)."""
    (tmp_path / "hosts").write_text("h1\nh2\nh3\n")
    (tmp_path / "p.yml").write_text(
        """
- hosts: all
  gather_facts: false
  tasks:
    - block:
        - command: /bin/false
          when: inventory_hostname != 'h3'
          run_once: true
      always:
        - debug: msg="always {{ ansible_play_hosts }}"
"""
    )
    run = _run(tmp_path / "p.yml", tmp_path / "hosts")
    assert run.rc == 2, run.stdout + run.stderr
    shown = [r["msg"] for r in run.results() if r["status"] == "ok"]
    assert shown and set(shown) == {"always []"}, shown


def test_a_play_whose_every_host_failed_ends_the_playbook(tmp_path):
    """Every host of play 1's batch fails: ansible-core 2.19.14 runs no later play (its
    recap has h1 failed=1 and no h2); rigger ran play 2 on h2."""
    (tmp_path / "hosts").write_text("h1\nh2\n")
    (tmp_path / "p.yml").write_text(
        """
- hosts: h1
  gather_facts: false
  tasks:
    - command: /bin/false
- hosts: h2
  gather_facts: false
  tasks:
    - debug: msg=second
"""
    )
    run = _run(tmp_path / "p.yml", tmp_path / "hosts")
    assert run.rc == 2, run.stdout + run.stderr
    assert [r["host"] for r in run.results()] == ["h1"], run.stdout


RESCUE_PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - block:
        - name: boom
          command: /bin/false
          when: inventory_hostname == 'h1'
      rescue:
        - debug: msg="{{ ansible_failed_task.name }} {{ ansible_failed_result.rc }}"
        - name: rescue fails
          command: /bin/false
          when: inventory_hostname == 'h1'
      always:
        - debug: msg=always
    - debug: msg=after
"""

FATAL_PLAY = """
- hosts: all
  gather_facts: false
  any_errors_fatal: true
  tasks:
    - block:
        - name: boom2
          command: /bin/false
          when: inventory_hostname == 'h2'
        - debug: msg=notreached
      rescue:
        - debug: msg="rescued {{ inventory_hostname }}"
    - debug: msg=after2
"""


def test_rescue_sees_the_failure_and_counts_as_ansible_does(tmp_path):
    """ansible_failed_task/ansible_failed_result in rescue; a failure that went to rescue
    counts rescued=1 even when the rescue fails (ansible-core 2.19.14: h1 ok=2 failed=1
    rescued=1)."""
    (tmp_path / "hosts").write_text("h1\nh2\n")
    (tmp_path / "p.yml").write_text(RESCUE_PLAY)
    run = _run(tmp_path / "p.yml", tmp_path / "hosts")
    assert run.rc == 2, run.stdout + run.stderr
    assert _messages(run, "h1") == ["boom 1", "always"]
    assert run.recap["h1"]["rescued"] == 1 and _counts(run, "h1") == (2, 0, 0, 1)
    assert "rescue fails" in run.stdout.split('"recap"')[-1]  # where h1 stopped


def test_any_errors_fatal_sends_every_host_to_rescue(tmp_path):
    """One host fails in a block: every host leaves the block for the rescue; only the
    failed one counts rescued (ansible-core 2.19.14)."""
    (tmp_path / "hosts").write_text("h1\nh2\n")
    (tmp_path / "p.yml").write_text(FATAL_PLAY)
    run = _run(tmp_path / "p.yml", tmp_path / "hosts")
    assert run.rc == 0, run.stdout + run.stderr
    assert _messages(run, "h1") == ["rescued h1", "after2"]
    assert _messages(run, "h2") == ["rescued h2", "after2"]
    assert run.recap["h1"]["rescued"] == 0 and run.recap["h2"]["rescued"] == 1
    assert _counts(run, "h1") == (2, 0, 1, 0)


TAGS_PLAY = """
- hosts: all
  gather_facts: false
  vars:
    t: dyn
  tasks:
    - debug: msg=ab
      tags: "a,b"
    - debug: msg=templ
      tags: "{{ t }}"
    - debug: msg=untagged
    - debug: msg=listed
      tags: [c, never]
    - debug: msg=alw
      tags: always
"""


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--tags", "b"], ["ab", "alw"]),
        (["--tags", "dyn"], ["templ", "alw"]),
        (["--tags", "tagged"], ["ab", "templ", "alw"]),
        (["--tags", "untagged"], ["untagged", "alw"]),
        (["--skip-tags", "a"], ["templ", "untagged", "alw"]),
        (["--skip-tags", "untagged"], ["ab", "templ", "alw"]),
        (["--tags", "never"], ["listed", "alw"]),
        ([], ["ab", "templ", "untagged", "alw"]),
    ],
)
def test_tags_select_as_ansible_does(tmp_path, options, expected):
    """Comma-separated and templated tags, tagged/untagged/never/always (each expected
    list recorded from ansible-core 2.19.14 with the same options)."""
    (tmp_path / "hosts").write_text("h1\n")
    (tmp_path / "p.yml").write_text(TAGS_PLAY)
    run = _run(tmp_path / "p.yml", tmp_path / "hosts", *options)
    assert run.rc == 0, run.stdout + run.stderr
    assert _messages(run, "h1") == expected


def test_play_connection_keyword_and_delegate_facts(tmp_path):
    """h1 and h2 would be reached over SSH but for the play's `connection: local`; a
    set_fact delegated to h2 with delegate_facts lands on h2, not h1 (ansible-core
    2.19.14: h1 'none', h2 'from h1'; h1 ok=2, h2 ok=1 skipped=1)."""
    (tmp_path / "hosts").write_text("h1\nh2\n")
    (tmp_path / "p.yml").write_text(
        """
- hosts: all
  gather_facts: false
  connection: local
  tasks:
    - set_fact:
        given: "from {{ inventory_hostname }}"
      delegate_to: h2
      delegate_facts: true
      when: inventory_hostname == 'h1'
    - debug:
        msg: "{{ given | default('none') }}"
"""
    )
    run = run_rigger(
        "run",
        str(tmp_path / "p.yml"),
        "-i",
        str(tmp_path / "hosts"),
        "-e",
        "rigger_run_lock=false",
        "--output",
        "jsonl",
    )
    assert run.rc == 0, run.stdout + run.stderr
    assert _messages(run, "h1") == ["none"]
    assert _messages(run, "h2") == ["from h1"]
    assert _counts(run, "h1") == (2, 0, 0, 0) and _counts(run, "h2") == (1, 0, 1, 0)


def test_role_template_is_found_in_the_roles_templates_dir(tmp_path):
    """write_file's template inside a role comes from the role's templates/ (where
    Ansible's template module looks), rendered with the role's parameters."""
    role = tmp_path / "roles" / "r"
    (role / "tasks").mkdir(parents=True)
    (role / "templates").mkdir()
    (role / "templates" / "conf.j2").write_text("port={{ p }}\n")
    out = tmp_path / "out.conf"
    (role / "tasks" / "main.yml").write_text(f"- write_file:\n    path: {out}\n    template: conf.j2\n")
    (tmp_path / "p.yml").write_text("- hosts: h1\n  gather_facts: false\n  roles:\n    - role: r\n      p: 8\n")
    (tmp_path / "hosts").write_text("h1\n")
    run = _run(tmp_path / "p.yml", tmp_path / "hosts")
    assert run.rc == 0, run.stdout + run.stderr
    assert out.read_text() == "port=8\n"


def test_until_registers_attempts_and_stripped_output(tmp_path):
    """A command retried until its third run: registered attempts=3, stdout without its
    newline, stderr_lines (ansible-core 2.19.14: "3 3 ['err']", ok=2 changed=1)."""
    (tmp_path / "hosts").write_text("h1\n")
    counter = "n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n; echo $n; echo err >&2\n"
    (tmp_path / "count.sh").write_text(counter)
    (tmp_path / "p.yml").write_text(
        """
- hosts: all
  gather_facts: false
  tasks:
    - name: count
      command: sh count.sh
      args:
        chdir: "{{ playbook_dir }}"
      register: r
      until: r.stdout == "3"
      retries: 5
      delay: 0
    - debug:
        msg: "{{ r.attempts }} {{ r.stdout }} {{ r.stderr_lines }}"
"""
    )
    run = _run(tmp_path / "p.yml", tmp_path / "hosts")
    assert run.rc == 0, run.stdout + run.stderr
    assert _messages(run, "h1") == ["3 3 ['err']"]
    assert _counts(run, "h1") == (2, 1, 0, 0)


def test_with_loops_shape_items_as_ansible_lookups_do(tmp_path):
    """with_items flattens one level, with_list does not; with_dict, with_indexed_items,
    with_nested, with_together (items recorded from ansible-core 2.19.14)."""
    (tmp_path / "hosts").write_text("h1\n")
    (tmp_path / "p.yml").write_text(
        """
- hosts: all
  gather_facts: false
  vars:
    d: {a: 1, b: 2}
  tasks:
    - {name: items, debug: msg=x, with_items: [[1, 2], 3]}
    - {name: dict, debug: msg=x, with_dict: "{{ d }}"}
    - {name: indexed, debug: msg=x, with_indexed_items: [x, y]}
    - {name: nested, debug: msg=x, with_nested: [[1, 2], [a, b]]}
    - {name: together, debug: msg=x, with_together: [[1, 2], [a]]}
    - {name: list, debug: msg=x, with_list: [[1, 2], 3]}
"""
    )
    run = _run(tmp_path / "p.yml", tmp_path / "hosts")
    assert run.rc == 0, run.stdout + run.stderr

    def items(task: str) -> list[object]:
        return [r["item"] for r in run.results(task)]

    assert items("items") == [1, 2, 3]
    assert items("dict") == [{"key": "a", "value": 1}, {"key": "b", "value": 2}]
    assert items("indexed") == [[0, "x"], [1, "y"]]
    assert items("nested") == [[1, "a"], [1, "b"], [2, "a"], [2, "b"]]
    assert items("together") == [[1, "a"], [2, None]]
    assert items("list") == [[1, 2], 3]
    assert _counts(run, "h1") == (6, 0, 0, 0)

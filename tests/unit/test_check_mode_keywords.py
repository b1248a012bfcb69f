"""Ansible's `diff` and `check_mode` keywords, and results check mode skipped (issue 30).

Real: the rigger CLI on real playbook files, run on the local connection of this machine
(files under tmp_path; nothing is mocked). What ansible-core 2.19.14 answers was read from
`ansible-playbook -i localhost, -c local --check` on the same playbooks: a command skipped in
check mode registers rc 0, empty stdout/stderr and `stdout_lines: []`; `check_mode: true`
changes nothing in a real run and leaves `ansible_check_mode` false; `diff: false` hides
the task's diff even under --diff.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

NO_LOCK = ("-e", "rigger_run_lock=false")
SECRET = "pw-Zq81-literal"


def _copy_book(tmp_path: Path, keyword: str) -> Path:
    book = tmp_path / "site.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        f"    - copy: {{content: '{SECRET}\\n', dest: '{tmp_path}/cred'}}\n{keyword}"
    )
    return book


def _outputs(tmp_path: Path, book: Path, rigger: Any) -> dict[str, str]:
    """Every place a check run's content can reach: console with --diff, jsonl, plan file, show."""
    plan = tmp_path / "site.plan"
    console = rigger("run", str(book), "--check", "--diff", *NO_LOCK)
    jsonl = rigger("run", str(book), "--check", "--diff", "--output", "jsonl", *NO_LOCK)
    made = rigger("plan", str(book), "-o", str(plan))
    assert (console.rc, jsonl.rc, made.rc) == (0, 0, 0), console.stdout + console.stderr + made.stderr
    shown = {fmt: rigger("show", str(plan), "--format", fmt).stdout for fmt in ("text", "markdown", "html")}
    return {"console": console.stdout, "jsonl": jsonl.stdout, "plan file": plan.read_text(), **shown}


@pytest.mark.parametrize(
    ("keyword", "leaks"),
    [
        ("", True),  # the control: without the keyword the content is the diff, shown everywhere
        ("      diff: false\n", False),
        ('      diff: "{{ 1 == 2 }}"\n', False),  # a template giving false
    ],
)
def test_diff_false_hides_the_content_from_every_output(tmp_path: Path, rigger: Any, keyword: str, leaks: bool) -> None:
    outputs = _outputs(tmp_path, _copy_book(tmp_path, keyword), rigger)
    assert {where: SECRET in text for where, text in outputs.items()} == dict.fromkeys(outputs, leaks)
    if not leaks:
        assert "(diff hidden: diff: false)" in outputs["text"]


def test_diff_true_shows_the_diff_without_the_flag_as_ansible_does(tmp_path: Path, rigger: Any) -> None:
    book = _copy_book(tmp_path, "      diff: true\n")
    shown = rigger("run", str(book), "--check", *NO_LOCK)
    plain = rigger("run", str(_copy_book(tmp_path, "")), "--check", *NO_LOCK)
    assert f"+{SECRET}" in shown.stdout and SECRET not in plain.stdout


def test_check_mode_true_plans_the_task_in_a_real_run_and_changes_nothing(tmp_path: Path, rigger: Any) -> None:
    book = _copy_book(tmp_path, "      check_mode: true\n      register: c\n    - debug: var=ansible_check_mode\n")
    run = rigger("run", str(book), "--output", "jsonl", *NO_LOCK)
    assert run.rc == 0, run.stdout + run.stderr
    assert [(r["status"], r["msg"].split(" ")[0]) for r in run.results()] == [
        ("changed", "would"),
        ("ok", "ansible_check_mode"),
    ]
    assert run.results()[1]["data"] == {"ansible_check_mode": False}  # as ansible-core 2.19
    assert not (tmp_path / "cred").exists()
    # planned in every run, applied in none: a saved plan has nothing pending for it
    assert rigger("plan", str(book), "-o", str(tmp_path / "p.plan"), "--detailed-exitcode").rc == 0


COMMAND_THEN_FALSE = (
    "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
    "    - command: echo hi\n      check_mode: false\n      register: x\n"
    "    - debug: var=x.stdout_lines\n"
)


@pytest.mark.parametrize(
    ("args", "rc", "expected"),
    [
        (("validate",), 4, "site.yml:5: `check_mode: false` (run this task for real even under --check) is not"),
        (("run", "--check"), 4, "pass --allow-check-mode-false to `rigger run` or `validate`"),
        (("plan", "-o", "x.plan"), 4, "`rigger plan` does not take it"),
        (("validate", "--allow-check-mode-false"), 0, "valid (1 play, 2 tasks"),
        (("run", "--check", "--allow-check-mode-false"), 0, "skipped: [localhost]: check_mode: false: not run under"),
        (("run", "--check", "--allow-check-mode-false"), 0, "x.stdout_lines = []"),
        # the console shows a value's line breaks escaped (engine/hosttext.py, the one renderer)
        (("run", "--allow-check-mode-false"), 0, r'x.stdout_lines = [\n  "hi"\n]'),
    ],
)
def test_check_mode_false_is_refused_by_name_or_skipped_by_name(
    tmp_path: Path, rigger: Any, args: tuple[str, ...], rc: int, expected: str
) -> None:
    """Never silently skipped: rigger's check mode runs no task for real, so the keyword is
    refused (exit 4, file:line, what to do) unless the user accepts the skip by a flag."""
    book = tmp_path / "site.yml"
    book.write_text(COMMAND_THEN_FALSE)
    extra = NO_LOCK if args[0] == "run" else ()
    run = rigger(args[0], str(book), *args[1:], *extra, cwd=tmp_path)
    assert run.rc == rc and expected in run.stdout + run.stderr, run.stdout + run.stderr


@pytest.mark.parametrize(
    ("keyword", "refusal"),
    [
        ("check_mode: 'yes'", "`check_mode: yes`: write true or false"),
        ("check_mode: '{{ flag }}'", "(a template is not supported)"),
        ("diff: sometimes", "`diff: sometimes` is neither true nor false"),
        ("strategy: free", "`strategy: free` is not supported"),
        ("force_handlers: true", "`force_handlers: True` is not supported"),
        ("order: shuffle", "`order: shuffle` is not supported"),
        ("strategy: ansible.builtin.linear", ""),
        ("check_mode: true", ""),
        ("diff: false", ""),
    ],
)
def test_play_keyword_values(tmp_path: Path, rigger: Any, keyword: str, refusal: str) -> None:
    book = tmp_path / "site.yml"
    book.write_text(f"- hosts: localhost\n  gather_facts: false\n  {keyword}\n  tasks:\n    - debug: msg=hi\n")
    run = rigger("validate", str(book))
    assert (run.rc, refusal in run.stderr) == ((4, True) if refusal else (0, True)), run.stderr
    if refusal:
        assert f"{book}:3: " in run.stderr and "Traceback" not in run.stderr


REGISTER_AND_DEBUG = """\
- hosts: localhost
  gather_facts: false
  tasks:
    - command: echo hi
      register: x
    - {name: lines, debug: var=x.stdout_lines}
    - {name: msg, debug: {msg: "{{ x.stdout_lines }}"}}
    - {name: stdout-when, debug: msg=ran, when: "x.stdout == 'hi'"}
    - {name: rc-when, debug: msg=ran, when: x.rc == 0}
    - {name: skipped-test, debug: msg=ran, when: x is skipped}
"""
# ansible-playbook 2.19.14 --check on the same playbook: the debug lines it printed
ANSIBLE_CHECK = {
    "command": ("skipped", None),
    "lines": ("ok", {"x.stdout_lines": []}),
    "msg": ("ok", {"msg": []}),
    "stdout-when": ("skipped", None),
    "rc-when": ("ok", {"msg": "ran"}),
    "skipped-test": ("ok", {"msg": "ran"}),
}


def test_a_command_skipped_in_check_mode_registers_what_ansible_registers(tmp_path: Path, rigger: Any) -> None:
    book = tmp_path / "site.yml"
    book.write_text(REGISTER_AND_DEBUG)
    run = rigger("run", str(book), "--check", "--output", "jsonl", *NO_LOCK)
    assert run.rc == 0, run.stdout + run.stderr
    got = {r["task"]: (r["status"], r["data"] if r["status"] == "ok" else None) for r in run.results()}
    assert got == ANSIBLE_CHECK


def test_a_plan_of_register_and_debug_is_whole_and_applies(tmp_path: Path, rigger: Any) -> None:
    book = tmp_path / "site.yml"
    book.write_text(REGISTER_AND_DEBUG)
    plan = tmp_path / "site.plan"
    made = rigger("plan", str(book), "-o", str(plan))
    assert made.rc == 0 and "INCOMPLETE" not in made.stdout + made.stderr, made.stdout + made.stderr
    applied = rigger("apply", str(plan), "--output", "jsonl")
    assert applied.rc == 0, applied.stdout + applied.stderr
    assert [r["data"] for r in applied.results("lines")] == [{"x.stdout_lines": ["hi"]}]


def test_stat_of_a_file_an_earlier_task_would_write_is_known_where_it_can_be(tmp_path: Path, rigger: Any) -> None:
    """rigger's plan sees its own earlier changes (ansible-core's check mode does not: it
    says exists false); what planning cannot know (owner, times) is null, never a crash."""
    book = tmp_path / "site.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        f"    - copy: {{content: 'x', dest: '{tmp_path}/new/f', mode: '0600'}}\n"
        f"    - stat: {{path: '{tmp_path}/new/f'}}\n      register: st\n"
        "    - {name: seen, debug: {msg: '{{ [st.stat.exists, st.stat.mode, st.stat.size, st.stat.pw_name] }}'}}\n"
    )
    run = rigger("run", str(book), "--check", "--output", "jsonl", *NO_LOCK)
    assert run.rc == 0, run.stdout + run.stderr
    assert [r["data"] for r in run.results("seen")] == [{"msg": [True, "0600", 1, None]}]
    assert not (tmp_path / "new").exists()


def test_loop_control_label_is_what_output_shows_and_the_item_is_what_registers(tmp_path: Path, rigger: Any) -> None:
    """ansible-core shows `(item=alice)` for `label: '{{ item.name }}'`; the label is how
    playbooks keep an item's secret off the screen. Registered results keep the item."""
    book = tmp_path / "site.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        f"    - debug: {{msg: '{{{{ item.name }}}}'}}\n      loop: [{{name: alice, pin: '{SECRET}'}}]\n"
        "      loop_control: {label: '{{ item.name }}'}\n      register: r\n"
        "    - {name: registered, debug: {msg: '{{ r.results[0].item.pin }}'}}\n"
    )
    text = rigger("run", str(book), *NO_LOCK)
    jsonl = rigger("run", str(book), "--output", "jsonl", *NO_LOCK)
    assert text.rc == 0 and "ok: [localhost] => (item=alice)" in text.stdout, text.stdout
    assert [r["item"] for r in jsonl.results("debug")] == ["alice"]
    assert [r["data"] for r in jsonl.results("registered")] == [{"msg": SECRET}]
    assert text.stdout.count(SECRET) == 1  # the registered task's own message only


@pytest.mark.parametrize(
    ("task", "refusal"),
    [
        ("    - debug: msg=x\n      listen: restart\n", "4: 'listen' is a handler's keyword, not a task's"),
        ("    - block:\n        - debug: msg=x\n      diff: 2\n", "6: `diff: 2` is neither true nor false"),
        ("    - block:\n        - debug: msg=x\n      check_mode: false\n", "6: `check_mode: false` (run this"),
        ("    - debug: msg=x\n      async: 10\n", "5: This action (debug) does not support async"),
        ("    - command: 'true'\n      async: 10\n      poll: 0\n", "6: `poll: 0` (fire and forget"),
        ("    - command: 'true'\n      async: 10\n      poll: 2\n", ""),
        ("    - ensure_shm_clean: {}\n      async: 10\n", "5: `async` on rigger's ensure_shm_clean has no"),
        ("    - debug: msg=x\n      async: 0\n", ""),
        ("    - debug: msg=x\n      loop: [1]\n      loop_control: {pause: 1}\n", "6: `loop_control: pause` is not"),
        ("    - block:\n        - debug: msg=x\n      ignore_unreachable: false\n", ""),
        (
            "    - block:\n        - debug: msg=x\n      ignore_unreachable: true\n",
            "6: `ignore_unreachable: True` is not",
        ),
        ("    - debug: msg=x\n      loop: [1]\n      loop_control: {label: one}\n", ""),
    ],
)
def test_task_keyword_values(tmp_path: Path, rigger: Any, task: str, refusal: str) -> None:
    book = tmp_path / "site.yml"
    book.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n" + task + "  handlers:\n"
                    "    - name: h\n      debug: msg=h\n      listen: restart\n")  # fmt: skip
    run = rigger("validate", str(book))
    assert run.rc == (4 if refusal else 0), run.stderr
    assert f"{book}:{refusal}" in run.stderr if refusal else run.stderr == ""


def test_a_check_mode_true_change_is_not_seen_by_later_tasks_while_planning(tmp_path: Path, rigger: Any) -> None:
    """It is never applied, so a later `stat` sees the file as the real run will: absent."""
    book = tmp_path / "site.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        f"    - copy: {{content: 'x', dest: '{tmp_path}/f'}}\n      check_mode: true\n"
        f"    - stat: {{path: '{tmp_path}/f'}}\n      register: st\n"
        "    - {name: seen, debug: var=st.stat.exists}\n"
    )
    for mode in ((), ("--check",)):
        run = rigger("run", str(book), *mode, "--output", "jsonl", *NO_LOCK)
        assert [r["data"] for r in run.results("seen")] == [{"st.stat.exists": False}], mode


def test_a_play_s_diff_false_hides_its_handlers_diffs_too(tmp_path: Path, rigger: Any) -> None:
    """Handlers take the play's keywords, as in Ansible."""
    book = tmp_path / "site.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  diff: false\n  tasks:\n"
        "    - command: 'true'\n      notify: write\n  handlers:\n"
        f"    - name: write\n      copy: {{content: '{SECRET}', dest: '{tmp_path}/cred'}}\n"
    )
    run = rigger("run", str(book), "--diff", *NO_LOCK)
    assert run.rc == 0 and "RUNNING HANDLER [write]" in run.stdout and SECRET not in run.stdout, run.stdout

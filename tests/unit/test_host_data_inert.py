"""Data that came from a host is never evaluated, whichever keyword or module reads it.

Real: `rigger run` (the CLI in the test process) on the local connection; a real command prints
``{{ 7 * 6 }}`` (the playbook spells the braces as octal escapes, so the playbook itself
holds no template). Registered results, set_fact copies and loop items must all show the
text as it was printed, never 42. Nothing is faked.
"""

from __future__ import annotations

import re
import textwrap

HOST_SAYS = "{{ 7 * 6 }}"
PRINT = r"printf '\173\173 7 * 6 \175\175'"

PLAYBOOK = textwrap.dedent(f"""\
    - hosts: localhost
      gather_facts: false
      tasks:
        - name: host output
          command: {PRINT}
          register: out
        - name: debug var
          debug:
            var: out.stdout
        - name: debug msg
          debug:
            msg: "{{{{ out.stdout }}}}"
        - name: assert that
          assert:
            that:
              - out.stdout != '42'
              - "out.stdout == '{{' ~ '{{ 7 * 6 }}' ~ '}}'"
        - name: when
          debug:
            msg: when ran
          when: out.stdout != '42'
        - name: set_fact copy
          set_fact:
            copied: "{{{{ out.stdout }}}}"
            nested: "{{{{ {{'a': [out.stdout]}} }}}}"
        - name: debug copied
          debug:
            var: copied
        - name: debug nested
          debug:
            var: nested.a[0]
        - name: loop
          debug:
            msg: "item={{{{ item }}}}"
          loop: "{{{{ [out.stdout, copied] }}}}"
        - name: changed_when
          command: "true"
          changed_when: out.stdout == '42'
        - name: failed_when
          command: "true"
          failed_when: out.stdout == '42'
        - name: until
          command: {PRINT}
          register: again
          until: again.stdout != '42'
          retries: 1
          delay: 0
    """)


def test_host_output_with_template_syntax_stays_text(rigger, tmp_path):
    book = tmp_path / "inert.yml"
    book.write_text(PLAYBOOK)
    run = rigger("run", str(book), "--output", "jsonl")
    assert run.rc == 0, run.stdout + run.stderr
    messages = {r["task"]: r.get("msg", "") for r in run.results()}
    assert messages["debug var"] == f"out.stdout = {HOST_SAYS}"
    assert messages["debug msg"] == HOST_SAYS
    assert messages["debug copied"] == f"copied = {HOST_SAYS}"
    assert messages["debug nested"] == f"nested.a[0] = {HOST_SAYS}"
    assert messages["when"] == "when ran"
    loop_messages = [r.get("msg") for r in run.results("loop")]
    assert f"item={HOST_SAYS}" in str(loop_messages), loop_messages
    # 7 * 6 was never computed; the test's own path (pytest-421/...), timings and timestamps may say 42
    shown = re.sub(r'"duration_s": [0-9.e-]+', "", run.stdout.replace(str(tmp_path), "TMP"))
    shown = re.sub(r'"(start|end|delta)": "[0-9:. -]+"', "", shown)  # command's timestamps, as Ansible's
    assert "42" not in shown.replace("\\u", "")


def test_an_expression_fed_a_size_from_a_host_is_refused_not_allocated(rigger, tmp_path):
    """The issue's example: a number a host printed sized a string on the controller."""
    book = tmp_path / "size.yml"
    book.write_text(
        textwrap.dedent("""\
            - hosts: localhost
              gather_facts: false
              tasks:
                - command: echo 10000000000
                  register: size
                - debug:
                    msg: "{{ 'x' * (size.stdout | int) }}"
            """)
    )
    run = rigger("run", str(book))
    assert run.rc == 2, run.stdout + run.stderr
    assert "the sandbox allows at most" in run.stdout + run.stderr
    assert "MemoryError" not in run.stdout + run.stderr


def test_file_lookup_content_stays_text_and_its_size_is_bounded(rigger, tmp_path):
    (tmp_path / "notes.txt").write_text(HOST_SAYS)
    huge = tmp_path / "huge.bin"
    with huge.open("wb") as handle:
        handle.truncate(17 * 2**20)  # sparse: no disk used, but st_size over the bound
    book = tmp_path / "lookup.yml"
    book.write_text(
        textwrap.dedent(f"""\
            - hosts: localhost
              gather_facts: false
              tasks:
                - name: file
                  debug:
                    msg: "{{{{ lookup('file', '{tmp_path / "notes.txt"}') }}}}"
                - name: huge
                  debug:
                    msg: "{{{{ lookup('file', '{huge}') | length }}}}"
            """)
    )
    run = rigger("run", str(book), "--output", "jsonl")
    messages = {r["task"]: r.get("msg", "") for r in run.results()}
    assert messages["file"] == HOST_SAYS
    assert run.rc == 2 and "is larger than" in messages["huge"], run.stdout


def test_inventory_host_and_group_names_holding_templates_stay_text(rigger, tmp_path):
    """Issue 18: a host and a group named with `{{ lookup('pipe', ...) }}` ran the command
    on the controller as soon as a task read inventory_hostname, group_names or groups
    (ansible-core 2.19 prints the names as they are). The command here only touches a
    marker file in tmp_path: its existence is the proof that it ran."""
    marker = tmp_path / "ran"
    host = f"web{{{{ lookup('pipe', 'touch {marker}') }}}}"
    group = f"grp{{{{ lookup('pipe', 'touch {marker}') }}}}"
    (tmp_path / "hosts.yml").write_text(
        "all:\n  vars: {ansible_connection: local}\n"
        f'  children:\n    "{group}":\n      hosts:\n        "{host}": {{}}\n'
    )
    book = tmp_path / "site.yml"
    reads = [
        "{{ inventory_hostname }}",
        "{{ inventory_hostname_short }}",
        "{{ group_names }}",
        "{{ groups }}",
        "{{ ansible_play_hosts }}",
        "{{ hostvars[inventory_hostname].inventory_hostname }}",
        "{{ ansible_host }}",
    ]
    tasks = "".join(f'    - debug: {{msg: "{read}"}}\n' for read in reads)
    book.write_text(f"- hosts: all\n  gather_facts: false\n  tasks:\n{tasks}")
    run = rigger("run", str(book), "-i", str(tmp_path / "hosts.yml"))
    assert run.rc == 0, run.stdout + run.stderr
    assert not marker.exists(), "a lookup in an inventory name ran on the controller"
    assert f"{host}: {host}" in run.stdout.replace("[", "").replace("]", "")

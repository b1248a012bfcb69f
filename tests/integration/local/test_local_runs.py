"""Real playbooks through the real CLI on this machine's local connection.

Real: the CLI, the engine, subprocesses, files in a temporary directory. Several
inventory hosts share the local connection to exercise fleet semantics (serial,
max_fail_percentage) without SSH; the SSH suite repeats this over a real sshd.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def workload(tmp_path):
    """A playbook using every idempotent core module, on files under tmp_path/tree."""
    tree = tmp_path / "tree"
    (tree / "old-weights" / "shards").mkdir(parents=True)
    (tree / "old-weights" / "shards" / "a.safetensors").write_bytes(b"x" * 4096)
    (tree / "config.json").write_text('{"kv": "fp8"}\n')
    book = tmp_path / "site.yml"
    book.write_text(
        "- hosts: localhost\n"
        "  vars:\n"
        f"    tree: {tree}\n"
        "    greeting: 'hello from {{ inventory_hostname }}'\n"
        "  tasks:\n"
        "    - name: config\n"
        "      write_file:\n"
        "        path: '{{ tree }}/config.json'\n"
        '        content: "{\\"kv\\": \\"auto\\"}\\n"\n'
        "        mode: '0600'\n"
        "      notify: config changed\n"
        "    - name: motd\n"
        "      write_file:\n"
        "        path: '{{ tree }}/motd'\n"
        "        content: '{{ greeting }}'\n"
        "    - name: old weights\n"
        "      ensure_absent:\n"
        "        path: '{{ tree }}/old-weights'\n"
        "    - name: marker\n"
        "      command:\n"
        "        cmd: touch {{ tree }}/marker\n"
        "        creates: '{{ tree }}/marker'\n"
        "  handlers:\n"
        "    - name: config changed\n"
        "      command: touch {{ tree }}/handler-ran\n"
    )
    return book, tree


def test_first_run_changes_second_run_changes_nothing(rigger, workload):
    book, tree = workload
    first = rigger("run", str(book), "--output", "jsonl")
    assert first.rc == 0, first.stdout + first.stderr
    assert first.recap["localhost"]["changed"] == 5  # 4 tasks + handler
    assert (tree / "config.json").read_text() == '{"kv": "auto"}\n'
    assert oct((tree / "config.json").stat().st_mode & 0o777) == "0o600"
    assert not (tree / "old-weights").exists()
    assert (tree / "handler-ran").exists()
    freed = first.results("old weights")[0]["data"]["bytes_freed"]
    assert freed >= 4096
    second = rigger("run", str(book), "--output", "jsonl")
    assert second.rc == 0
    assert second.recap["localhost"]["changed"] == 0
    assert [r["status"] for r in second.results()] == ["ok"] * 5  # facts + 4 tasks, no handler


def test_check_mode_touches_nothing_and_reports_what_would_change(rigger, workload, digest):
    book, tree = workload
    before = digest(tree)
    run = rigger("run", str(book), "--check", "--diff", "--output", "jsonl")
    assert run.rc == 0, run.stderr
    assert digest(tree) == before
    statuses = {r["task"]: r["status"] for r in run.results()}
    assert statuses["config"] == "changed" and statuses["old weights"] == "changed"
    assert statuses["marker"] == "skipped"
    config_diff = run.results("config")[0]["diffs"][0]
    assert '"kv": "fp8"' in config_diff["before"] and '"kv": "auto"' in config_diff["after"]


def test_write_file_keeps_a_backup(rigger, workload):
    book, tree = workload
    assert rigger("run", str(book)).rc == 0
    backups = list(tree.glob("config.json.*.bak"))
    assert len(backups) == 1 and backups[0].read_text() == '{"kv": "fp8"}\n'


def test_text_output_groups_identical_diffs(rigger, tmp_path):
    inv = write(
        tmp_path / "hosts.yml",
        """\
        all:
          hosts:
            a: {ansible_connection: local}
            b: {ansible_connection: local}
        """,
    )
    book = write(
        tmp_path / "p.yml",
        f"""\
        - hosts: all
          gather_facts: false
          tasks:
            - write_file:
                path: "{tmp_path}/{{{{ inventory_hostname }}}}.txt"
                content: "same\\n"
        """,
    )
    run = rigger("run", str(book), "-i", str(inv), "--check", "--diff")
    assert run.rc == 0
    assert "changed: [a]" in run.stdout and "changed: [b]" in run.stdout
    assert run.stdout.count("+same") == 2  # different paths: two diffs
    book2 = write(
        tmp_path / "p2.yml",
        f"""\
        - hosts: all
          gather_facts: false
          tasks:
            - write_file: {{path: "{tmp_path}/shared.txt", content: "same\\n"}}
        """,
    )
    run2 = rigger("run", str(book2), "-i", str(inv), "--check", "--diff")
    assert run2.stdout.count("+same") == 1 and "diff on a, b" in run2.stdout


def test_block_rescue_always_order_and_recap(rigger, tmp_path):
    log = tmp_path / "order.log"
    book = write(
        tmp_path / "p.yml",
        f"""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - block:
                - command: sh -c "echo block >> {log}"
                  args_placeholder: 1
                - command: "false"
                - command: sh -c "echo never >> {log}"
              rescue:
                - command: sh -c "echo rescue >> {log}"
              always:
                - command: sh -c "echo always >> {log}"
            - command: sh -c "echo after >> {log}"
        """.replace("                  args_placeholder: 1\n", ""),
    )
    run = rigger("run", str(book), "--output", "jsonl")
    assert run.rc == 0, run.stdout
    assert log.read_text().split() == ["block", "rescue", "always", "after"]
    assert run.recap["localhost"]["rescued"] == 1 and run.recap["localhost"]["failed"] == 0


def test_failure_without_rescue_runs_always_then_stops_host(rigger, tmp_path):
    log = tmp_path / "order.log"
    book = write(
        tmp_path / "p.yml",
        f"""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - block:
                - command: "false"
              always:
                - command: sh -c "echo always >> {log}"
            - command: sh -c "echo after >> {log}"
        """,
    )
    run = rigger("run", str(book), "--output", "jsonl")
    assert run.rc == 2
    assert log.read_text().split() == ["always"]


def test_handlers_fire_only_when_notified_by_a_change(rigger, tmp_path):
    book = write(
        tmp_path / "p.yml",
        f"""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - write_file: {{path: "{tmp_path}/f", content: "x"}}
              notify: [first, second]
            - debug: {{msg: hi}}
              notify: third
          handlers:
            - name: second
              command: touch {tmp_path}/second
            - name: first
              command: touch {tmp_path}/first
            - name: third
              command: touch {tmp_path}/third
        """,
    )
    run = rigger("run", str(book), "--output", "jsonl")
    handler_tasks = [e["name"] for e in run.events if e["event"] == "task_start" and e["handler"]]
    assert handler_tasks == ["second", "first"]  # definition order, once each
    assert not (tmp_path / "third").exists()
    (tmp_path / "first").unlink()
    rigger("run", str(book))
    assert not (tmp_path / "first").exists()


def test_loop_register_when_until_and_set_fact(rigger, tmp_path):
    counter = tmp_path / "count"
    book = write(
        tmp_path / "p.yml",
        f"""\
        - hosts: localhost
          tasks:
            - command: "echo {{{{ item }}}}"
              loop: [a, b, c]
              loop_control: {{loop_var: letter_item}}
              register: echoed
              changed_when: false
              when: item != 'b'
            - set_fact:
                letters: "{{{{ echoed.results | selectattr('skipped', 'equalto', false)
                           | map(attribute='stdout') | map('trim') | list }}}}"
            - assert:
                that: ["letters == ['a', 'c']", "facts.cpu_count > 0"]
            - command: sh -c 'echo x >> {counter}; wc -l < {counter}'
              register: n
              until: n.stdout | int >= 3
              retries: 5
              delay: 0
        """,
    ).read_text()
    write(tmp_path / "p.yml", book.replace("loop_var: letter_item", "loop_var: item"))
    run = rigger("run", str(tmp_path / "p.yml"), "--output", "jsonl")
    assert run.rc == 0, run.stdout
    assert counter.read_text().count("x") == 3


def test_failed_when_ignore_errors_and_exit_codes(rigger, tmp_path):
    book = write(
        tmp_path / "p.yml",
        """\
        - hosts: localhost
          gather_facts: false
          tasks:
            - command: sh -c "echo ERROR; exit 0"
              register: out
              failed_when: "'ERROR' in out.stdout"
              ignore_errors: true
            - command: "true"
        """,
    )
    run = rigger("run", str(book), "--output", "jsonl")
    assert run.rc == 0
    assert run.recap["localhost"]["ignored"] == 1 and run.recap["localhost"]["failed"] == 0
    write(book, book.read_text().replace("      ignore_errors: true\n", ""))
    assert rigger("run", str(book)).rc == 2


def test_no_log_masks_output(rigger, tmp_path):
    book = write(
        tmp_path / "p.yml",
        """\
        - hosts: localhost
          gather_facts: false
          tasks:
            - command: echo hunter2-secret
              no_log: true
        """,
    )
    for args in (("--output", "jsonl"), ("-v",)):
        run = rigger("run", str(book), *args)
        assert run.rc == 0 and "hunter2-secret" not in run.stdout + run.stderr


def test_tags_and_skip_tags(rigger, tmp_path):
    book = write(
        tmp_path / "p.yml",
        f"""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - command: touch {tmp_path}/a
              tags: [a]
            - command: touch {tmp_path}/b
              tags: [b]
            - command: touch {tmp_path}/always
              tags: [always]
        """,
    )
    rigger("run", str(book), "-t", "a")
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == "") == ["a", "always"]
    rigger("run", str(book), "--skip-tags", "a,always")
    assert (tmp_path / "b").exists()


def test_extra_vars_win_and_vars_files_beat_play_vars(rigger, tmp_path):
    write(tmp_path / "vars.yml", "who: vars_file\nother: from_file\n")
    write(tmp_path / "extra.yml", "extra_from_file: yes-it-is\n")
    book = write(
        tmp_path / "p.yml",
        f"""\
        - hosts: localhost
          gather_facts: false
          vars: {{who: play, other: play}}
          vars_files: [vars.yml]
          tasks:
            - set_fact: {{other: set_fact}}
            - write_file:
                path: {tmp_path}/out
                content: "{{{{ who }}}} {{{{ other }}}} {{{{ extra_from_file }}}}"
        """,
    )
    assert rigger("run", str(book), "-e", "@" + str(tmp_path / "extra.yml")).rc == 0
    assert (tmp_path / "out").read_text() == "vars_file set_fact yes-it-is"
    assert rigger("run", str(book), "-e", "who=cli other=cli", "-e", '{"extra_from_file": "json"}').rc == 0
    assert (tmp_path / "out").read_text() == "cli cli json"


def test_runtime_undefined_attribute_fails_the_task_naming_it(rigger, tmp_path):
    book = write(
        tmp_path / "p.yml",
        """\
        - hosts: localhost
          tasks:
            - debug: {msg: "{{ facts.gpuz }}"}
        """,
    )
    run = rigger("run", str(book), "--output", "jsonl")
    assert run.rc == 2
    assert "gpuz" in run.results("debug")[0]["msg"]


@pytest.fixture
def local_fleet(tmp_path):
    hosts = "\n".join(f"    h{i}: {{ansible_connection: local}}" for i in range(1, 11))
    return write(tmp_path / "fleet.yml", "all:\n  hosts:\n" + hosts + "\n")


def _fail_on(tmp_path, names, extra_play=""):
    cond = " or ".join(f"inventory_hostname == '{n}'" for n in names) or "false"
    return write(
        tmp_path / "p.yml",
        f"""\
        - hosts: all
          gather_facts: false
          {extra_play}
          tasks:
            - command: "false"
              when: "{cond}"
            - command: touch {tmp_path}/done-{{{{ inventory_hostname }}}}
        """,
    )


def test_serial_batches_run_in_order(rigger, tmp_path, local_fleet):
    book = write(
        tmp_path / "p.yml",
        """\
        - hosts: all
          gather_facts: false
          serial: [1, 3, "50%"]
          tasks:
            - debug: {msg: "{{ inventory_hostname }}"}
        """,
    )
    run = rigger("run", str(book), "-i", str(local_fleet), "--output", "jsonl")
    order = [r["host"] for r in run.results()]
    assert order[:1] == ["h1"] and sorted(order[1:4]) == ["h2", "h3", "h4"]
    assert sorted(order[4:9]) == ["h5", "h6", "h7", "h8", "h9"] and order[9:] == ["h10"]


@pytest.mark.parametrize(("failing", "stops"), [(["h1"], False), (["h1", "h2"], False), (["h1", "h2", "h3"], True)])
def test_max_fail_percentage_is_exceeded_not_equalled(rigger, tmp_path, local_fleet, failing, stops):
    book = _fail_on(tmp_path, failing, "max_fail_percentage: 20")
    run = rigger("run", str(book), "-i", str(local_fleet), "--output", "jsonl")
    done = sorted(p.name for p in tmp_path.glob("done-*"))
    assert run.rc == 2
    assert (done == []) is stops, done
    if not stops:
        assert len(done) == 10 - len(failing)


def test_any_errors_fatal(rigger, tmp_path, local_fleet):
    book = _fail_on(tmp_path, ["h4"], "any_errors_fatal: true")
    run = rigger("run", str(book), "-i", str(local_fleet))
    assert run.rc == 2 and not list(tmp_path.glob("done-*"))


def test_limit(rigger, tmp_path, local_fleet):
    book = _fail_on(tmp_path, [])
    assert rigger("run", str(book), "-i", str(local_fleet), "-l", "h1:h2").rc == 0
    assert sorted(p.name for p in tmp_path.glob("done-*")) == ["done-h1", "done-h2"]

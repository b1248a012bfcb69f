"""Ansible's `module_defaults` keyword, and handlers that `listen` to a notified name.

Real: the rigger CLI (in the test process) on real playbook files, run on this machine's local
connection; the loader on real files. Nothing is mocked. What ansible-core 2.19.14 answers was
read from `ansible-playbook -i localhost, -c local` on the same playbooks (the play below
printed `[false, "/", "/etc"]`, and its handler "skipped, since .../exists exists"; a handler
with `listen: h` ran after `h` on `notify: h`; `comand` in module_defaults was refused as
"Could not resolve action ansible.legacy.comand in module_defaults").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.model import walk
from engine.playbook.loader import load_playbook

NO_LOCK = ("-e", "rigger_run_lock=false")


def _book(tmp_path: Path, text: str) -> Path:
    book = tmp_path / "site.yml"
    book.write_text(text)
    return book


def test_defaults_inherit_replace_and_yield_to_the_task_as_ansible_does(tmp_path: Path, rigger: Any) -> None:
    (tmp_path / "exists").touch()
    book = _book(
        tmp_path,
        f"""- hosts: localhost
  gather_facts: false
  module_defaults:
    command: {{chdir: /tmp, creates: {tmp_path}/exists}}
    group/aws: {{region: x}}
    yum: {{name: never-used}}
  tasks:
    - command: pwd
      register: skipped_by_creates
    - command: pwd
      register: replaced
      module_defaults:
        ansible.builtin.command: {{chdir: /}}
    - command: pwd
      args: {{chdir: /etc, creates: "{{{{ omit }}}}"}}
      register: own
    - debug: {{msg: "{{{{ [skipped_by_creates.changed, replaced.stdout, own.stdout] | join(',') }}}}"}}
      changed_when: true
      notify: h
  handlers:
    - name: h
      command: pwd
      changed_when: false
""",
    )
    out = rigger("run", "-i", "localhost,", str(book), *NO_LOCK)
    assert out.rc == 0, out.stdout + out.stderr
    assert "False,/,/etc" in out.stdout  # the play's creates skipped the first; the task's own args won
    handler_part = out.stdout.split("RUNNING HANDLER")[1]
    assert "exists exists" in handler_part  # a handler gets the play's defaults too


def test_a_block_default_is_rendered_with_the_task_variables(tmp_path: Path, rigger: Any) -> None:
    book = _book(
        tmp_path,
        """- hosts: localhost
  gather_facts: false
  module_defaults:
    debug: {msg: from the play}
  tasks:
    - debug: {}
    - block:
        - debug: {}
      vars: {n: 2}
      module_defaults:
        ansible.builtin.debug: {msg: "from the block {{ n }}"}
""",
    )
    out = rigger("run", "-i", "localhost,", str(book), *NO_LOCK)
    assert out.rc == 0, out.stdout + out.stderr
    assert "ok: [localhost]: from the play" in out.stdout
    assert "ok: [localhost]: from the block 2" in out.stdout


def _args_of(book: Path) -> list[dict[str, Any]]:
    return [dict(task.args) for task, _ in walk(load_playbook(book).plays[0].tasks)]


def test_package_and_service_get_their_manager_modules_defaults_under_their_own(tmp_path: Path) -> None:
    """Ansible's package and service action plugins run apt / systemd with that module's
    defaults under the task's arguments; a dnf default never reaches rigger's package."""
    book = _book(
        tmp_path,
        """- hosts: localhost
  gather_facts: false
  tasks:
    - package: {name: sl}
      module_defaults:
        apt: {update_cache: true, cache_valid_time: 60}
        dnf: {enablerepo: x}
        package: {cache_valid_time: 5}
    - service: {name: nvidia-persistenced, state: started}
      module_defaults:
        systemd: {enabled: true}
""",
    )
    package, service = _args_of(book)
    assert package == {"name": "sl", "update_cache": True, "cache_valid_time": 5}
    assert service == {"name": "nvidia-persistenced", "state": "started", "enabled": True}


@pytest.mark.parametrize(
    ("keyword", "says"),
    [
        ("module_defaults: {comand: {chdir: /}}", "could not resolve action 'comand'"),
        ("module_defaults: {command: [chdir]}", "`command` takes a mapping of arguments"),
        ("module_defaults: [1]", "module_defaults"),
        ("module_defaults: {command: {chdir: 3, bogus: 1}}", "bogus"),
    ],
)
def test_bad_module_defaults_are_refused_with_the_line_before_anything_runs(
    tmp_path: Path, rigger: Any, keyword: str, says: str
) -> None:
    marker = tmp_path / "ran"
    book = _book(
        tmp_path,
        f"- hosts: localhost\n  gather_facts: false\n  tasks:\n    - command: touch {marker}\n      {keyword}\n",
    )
    out = rigger("run", "-i", "localhost,", str(book), *NO_LOCK)
    assert out.rc == 4, out.stdout + out.stderr
    assert f"{book}:" in out.stderr and says in out.stderr
    assert "Traceback" not in out.stderr and not marker.exists()


def test_a_notified_name_runs_the_handler_of_that_name_and_every_listener(tmp_path: Path, rigger: Any) -> None:
    book = _book(
        tmp_path,
        """- hosts: localhost
  gather_facts: false
  tasks:
    - debug: {msg: x}
      changed_when: true
      notify: h
  handlers:
    - name: h
      debug: {msg: first handler}
    - name: h2
      debug: {msg: second handler}
      listen: h
    - name: h3
      debug: {msg: never}
""",
    )
    out = rigger("run", "-i", "localhost,", str(book), *NO_LOCK)
    assert out.rc == 0, out.stdout + out.stderr
    assert out.stdout.index("first handler") < out.stdout.index("second handler")
    assert "never" not in out.stdout


def test_a_handler_notified_by_a_later_one_runs_in_the_next_pass_and_none_runs_twice(
    tmp_path: Path, rigger: Any
) -> None:
    """ansible-core 2.19.14 ran b, c, a: b notifies x, which c (after it) and a (before it) listen to."""
    book = _book(
        tmp_path,
        """- hosts: localhost
  gather_facts: false
  tasks:
    - debug: {msg: x}
      changed_when: true
      notify: b
  handlers:
    - name: a
      debug: {msg: handler-a}
      listen: x
    - name: b
      debug: {msg: handler-b}
      changed_when: true
      notify: x
    - name: c
      debug: {msg: handler-c}
      listen: x
""",
    )
    out = rigger("run", "-i", "localhost,", str(book), *NO_LOCK)
    assert out.rc == 0, out.stdout + out.stderr
    ran = [line.rsplit(": ", 1)[1] for line in out.stdout.splitlines() if "handler-" in line]
    assert ran == ["handler-b", "handler-c", "handler-a"]

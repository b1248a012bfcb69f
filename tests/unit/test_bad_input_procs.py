"""Bad input from issue 10 (processes, GPUs, -e): the real CLI exits 4 or 5 naming the
file:line or the option, never 250, and no host is touched.

Real: the CLI in a subprocess, files, a FIFO, /dev/zero. Nothing is faked.
"""

from __future__ import annotations

import os

import pytest

from engine.yamlload import MAX_BYTES, MAX_DEPTH

PLAY = """\
- hosts: localhost
  gather_facts: false
  tasks:
    - name: would touch the host
      command: touch {marker}
    - name: idle
      ensure_gpus_idle:
        gpus: {gpus}
"""


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        ("[-1]", "gpus.0: -1 is less than the minimum of 0"),
        ("[0, -3]", "gpus.1: -3 is less than the minimum of 0"),
        ("[true]", "gpus.0: True is not of type 'integer', 'string'"),
        ("[1.5]", "gpus.0: 1.5 is not of type 'integer', 'string'"),
        ("[[0]]", "gpus.0: [0] is not of type 'integer', 'string'"),
        ('[""]', "gpus.0: '' should be non-empty"),
        ("[]", "gpus: [] should be non-empty"),
        ("some", "gpus: 'all' was expected"),
        ("{a: 1}", "gpus: {'a': 1} is not of type 'string', 'array'"),
    ],
)
def test_wrong_gpu_items_exit_4_with_location(rigger, tmp_path, gpus, message):
    marker = tmp_path / "touched"
    book = tmp_path / "play.yml"
    book.write_text(PLAY.format(marker=marker, gpus=gpus))
    run = rigger("run", str(book))
    assert run.rc == 4, run.stderr + run.stdout
    assert f"{book}:8: {message}" in run.stderr, run.stderr
    assert not marker.exists()


def _ok_book(tmp_path):
    book = tmp_path / "play.yml"
    book.write_text("- hosts: localhost\n  gather_facts: false\n  tasks: []\n")
    return book


def test_deeply_nested_json_extra_vars_exit_5(rigger, tmp_path):
    deep = '{"a":' * 10_000 + "1" + "}" * 10_000
    run = rigger("run", str(_ok_book(tmp_path)), "-e", deep)
    assert run.rc == 5, run.stderr
    assert f"-e: JSON nested more than {MAX_DEPTH} levels deep" in run.stderr
    brackets_in_a_string = '{"a": "\\"' + "[" * 200 + '"}'
    assert rigger("run", str(_ok_book(tmp_path)), "-e", brackets_in_a_string).rc == 0


def test_extra_vars_from_dev_zero_is_refused_without_reading(rigger, tmp_path):
    run = rigger("run", str(_ok_book(tmp_path)), "-e", "@/dev/zero")
    assert run.rc == 4, run.stderr
    assert "/dev/zero: not a regular file" in run.stderr


def test_extra_vars_from_a_fifo_never_blocks(rigger, tmp_path):
    fifo = tmp_path / "vars.fifo"
    os.mkfifo(fifo)
    run = rigger("run", str(_ok_book(tmp_path)), "-e", f"@{fifo}")
    assert run.rc == 4 and f"{fifo}: not a regular file" in run.stderr, run.stderr


def test_extra_vars_file_over_the_limit_is_named(rigger, tmp_path):
    big = tmp_path / "vars.yml"
    big.write_text("a: " + "x" * (MAX_BYTES + 1) + "\n")
    run = rigger("run", str(_ok_book(tmp_path)), "-e", f"@{big}")
    assert run.rc == 4 and f"{big}: file is larger than the limit of {MAX_BYTES} bytes" in run.stderr


def test_extra_vars_from_a_directory_is_named(rigger, tmp_path):
    run = rigger("run", str(_ok_book(tmp_path)), "-e", f"@{tmp_path}")
    assert run.rc == 4 and f"{tmp_path}: is a directory" in run.stderr, run.stderr


def test_template_delimiters_inside_a_condition_exit_4(rigger, tmp_path):
    """`failed_when: "{{ x }} == 1"` crashed the syntax check (an assert) with exit 250."""
    book = tmp_path / "play.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - command: 'true'\n      register: out\n      failed_when: \"{{ out.rc }} == 1\"\n"
    )
    run = rigger("run", str(book))
    assert run.rc == 4, run.stderr
    assert f"{book}:6: 'failed_when': template syntax error" in run.stderr


def test_braces_inside_a_string_in_a_condition_are_fine(rigger, tmp_path):
    book = tmp_path / "play.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - command: printf '\\173\\173'\n      register: out\n      failed_when: \"out.stdout != '{{'\"\n"
    )
    run = rigger("run", str(book))
    assert run.rc == 0, run.stdout + run.stderr

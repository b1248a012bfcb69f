"""The real CLI's informational commands."""

from __future__ import annotations

import json


def test_modules_lists_every_module_with_a_summary(rigger):
    run = rigger("modules")
    assert run.rc == 0
    for name in ("command", "write_file", "ensure_absent", "assert", "set_fact", "debug"):
        assert any(line.startswith(name + " ") for line in run.stdout.splitlines()), name


def test_modules_summaries_are_whole_sentences(rigger):
    """A summary is the docstring's first sentence, however many lines it spans (setup's and
    check_serving_group's ran onto a second line and were cut there)."""
    lines = rigger("modules").stdout.splitlines()
    cut = [line for line in lines if not line.rstrip().endswith((".", "?", "!"))]
    assert not cut, cut
    setup = next(line for line in lines if line.startswith("setup "))
    assert setup.endswith("or only some of them (``filter``).")


def test_doc_is_generated_from_the_schema(rigger):
    run = rigger("doc", "write_file")
    assert run.rc == 0
    assert "mode (type: string" in run.stdout and "default: true" in run.stdout
    assert "did you mean 'write_file'" in rigger("doc", "write_fiel").stderr
    assert rigger("doc", "write_fiel").rc == 5


def test_facts_prints_json(rigger):
    run = rigger("facts")
    facts = json.loads(run.stdout)["localhost"]
    assert facts["cpu_count"] >= 1 and facts["mem_total_mib"] > 0
    assert isinstance(facts["gpus"], list) and facts["gpu_backend"] in ("nvml", "nvidia-smi", "none")
    assert facts["shm"]["path"] == "/dev/shm"


def test_facts_mask_secret_named_environment_variables(rigger):
    """FOO_TOKEN in the host's environment printed in clear; masked as plan files mask it."""
    run = rigger("facts", env={"RIGGER_TEST_TOKEN": "tok-9f3a2c71", "RIGGER_TEST_PLAIN": "plain-4b1e"})
    assert run.rc == 0, run.stderr
    env = json.loads(run.stdout)["localhost"]["ansible_facts"]["env"]
    assert env["RIGGER_TEST_TOKEN"] == "<hidden: RIGGER_TEST_TOKEN>" and env["RIGGER_TEST_PLAIN"] == "plain-4b1e"
    assert "tok-9f3a2c71" not in run.stdout


def test_validate_connects_to_nothing(rigger, tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    gpu01: {ansible_host: 192.0.2.1}\n")
    book = tmp_path / "p.yml"
    book.write_text("- hosts: all\n  tasks:\n    - command: echo {{ inventory_hostname }}\n")
    run = rigger("validate", str(book), "-i", str(inv), timeout_s=20)
    assert run.rc == 0 and "valid" in run.stdout
    # "1 plays, 1 tasks, 1 hosts" before
    assert run.stdout.strip().endswith(": valid (1 play, 1 task, 1 host in inventory)"), run.stdout


def test_an_extra_var_nothing_uses_warns_with_did_you_mean(rigger, tmp_path):
    """Real CLI, real playbook file; the demo's old header said `-e demo_state=stopped` while
    the variable is serve_state, and the typo was silently ignored (issue 11)."""
    book = tmp_path / "play.yml"
    book.write_text(
        "- hosts: localhost\n"
        "  gather_facts: false\n"
        "  vars:\n"
        "    serve_state: started\n"
        "    demo_state_dir: /tmp\n"
        "  tasks:\n"
        '    - debug: {msg: "{{ serve_state }} {{ demo_state_dir }} {{ port | default(1) }}"}\n'
    )
    typo = rigger("run", str(book), "-e", "demo_state=stopped", "--output", "jsonl")
    assert typo.rc == 0
    notices = [e["message"] for e in typo.events if e["event"] == "notice"]
    assert notices == [
        "-e demo_state: nothing in the playbook or inventory uses this variable (did you mean 'serve_state'?)"
    ]
    used = rigger("run", str(book), "-e", "serve_state=stopped", "-e", "port=2", "-e", "rigger_run_lock=false",
                  "--output", "jsonl")  # fmt: skip
    assert used.rc == 0 and not [e for e in used.events if e["event"] == "notice"]
    checked = rigger("validate", str(book), "-e", "demo_state=stopped")
    assert checked.rc == 0 and "did you mean 'serve_state'" in checked.stderr

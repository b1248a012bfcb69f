"""Issue 31: one mask for every output. Each sink rigger writes to (the console of `run`,
`--output jsonl`, the plan file, `show` in every format, `inventory`, `facts`, error
messages, diffs, the watch journal and state file, rollout records) is listed in ``SINKS``
and read back after a run whose secrets are templated (``hf_token: "{{ lookup('env', ...) }}"``),
nested (``users[0].password``), declared (``rigger_secret_vars``), the output of a
``no_log`` task shown by a later task, and encoded inside larger strings (``'bob:' ~ pw |
b64encode``, ``urlencode`` with a space and ``&``). No secret may be readable in any of them,
and every CLI command must be listed (a new command without a sink entry fails).

Real: the CLI (click, in this process), templating, the local connection, the plan file,
the watch journal and state file, the baselines store. Nothing is mocked.
"""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import pytest

from engine import cli, mask
from engine.baselines.store import BaselineStore
from engine.watch import store as watch_store
from engine.watch.journal import Journal

HF = "hf_mAsKtEsT0123456789"  # only in the environment: the inventory's value is a template
DB = "db-pw-7c2e91aa"
BOB = "bob-pw-31415926"
SPACED = "pa ss&word 42"  # URL encoding turns it into pa+ss%26word+42
SECRETS = {
    "hf_token (templated)": HF,
    "db_password": DB,
    "users[0].password": BOB,
    "app_pass": SPACED,
    "app_pass urlencoded": urllib.parse.quote_plus(SPACED),
    "base64 of bob:app_pass": base64.b64encode(f"bob:{SPACED}".encode()).decode(),
    "base64 of hf_token": base64.b64encode(HF.encode()).decode(),
    "declared in rigger_secret_vars": "declared-31337",
    "output of a no_log task": "nolog-out-271828",
}

INVENTORY = f"""\
all:
  hosts:
    localhost:
      ansible_connection: local
      db_password: {DB}
      ansible_become_password: {DB}
      hf_token: "{{{{ lookup('env', 'RIGGER_MASK_HF') }}}}"
      users:
        - name: bob
          password: {BOB}
      app_pass: "{SPACED}"
      rigger_secret_vars: [conn_string]
      conn_string: "postgres://u@h/db?x=declared-31337"
"""

PLAYBOOK = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: the token
      debug: {msg: "{{ hf_token }}"}
    - name: a nested password
      debug: {msg: "{{ users[0].password }}"}
    - name: basic auth
      debug: {msg: "{{ ('bob:' ~ app_pass) | b64encode }}"}
    - name: a query string
      debug: {msg: "{{ {'p': app_pass, 'u': 'me'} | urlencode }}"}
    - name: the token file
      copy: {content: "token={{ hf_token }}\\n", dest: "{{ out }}/token.env"}
    - name: a command that prints secrets
      command: "printf '%s %s %s' {{ db_password }} {{ hf_token | b64encode }} {{ hf_token }}"
      changed_when: false
    - name: a declared secret
      debug: {msg: "{{ conn_string }}"}
    - name: a secret the host answers
      command: printf '%s' nolog-out-271828
      no_log: true
      register: fetched
      changed_when: false
    - name: shown later
      debug: {var: fetched.stdout}
    - name: a failure that names one
      fail: {msg: "cannot log in with {{ hf_token }}"}
      ignore_errors: true
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mask")
    (folder / "hosts.yml").write_text(INVENTORY)
    (folder / "book.yml").write_text(PLAYBOOK)
    return folder


def _cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    monkeypatch.setenv("RIGGER_MASK_HF", HF)
    monkeypatch.setenv("NO_COLOR", "1")
    cli.exit_code(list(args))
    captured = capsys.readouterr()
    return captured.out + captured.err


Sink = Callable[[Path, pytest.CaptureFixture[str], pytest.MonkeyPatch], str]


def _run(*extra: str) -> Sink:
    def sink(folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
        book, inv = str(folder / "book.yml"), str(folder / "hosts.yml")
        out = folder / f"out{len(extra)}"
        out.mkdir(exist_ok=True)
        return _cli(capsys, monkeypatch, "run", book, "-i", inv, "-e", f"out={out}", *extra)

    return sink


def _planned(folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Path:
    plan = folder / "plan.json"
    if not plan.exists():
        (folder / "outp").mkdir(exist_ok=True)
        args = ("plan", str(folder / "book.yml"), "-i", str(folder / "hosts.yml"), "-e", f"out={folder / 'outp'}")
        _cli(capsys, monkeypatch, *args, "-o", str(plan))
    return plan


def _plan_console(folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    (folder / "outq").mkdir(exist_ok=True)
    args = ("plan", str(folder / "book.yml"), "-i", str(folder / "hosts.yml"), "-e", f"out={folder / 'outq'}")
    return _cli(capsys, monkeypatch, *args, "-o", str(folder / "plan2.json"))


def _plan_file(folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    return _planned(folder, capsys, monkeypatch).read_text()


def _show(fmt: str) -> Sink:
    def sink(folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
        plan = _planned(folder, capsys, monkeypatch)
        return _cli(capsys, monkeypatch, "show", str(plan), "--format", fmt)

    return sink


def _command(*args: str) -> Sink:
    def sink(folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
        given = [str(folder / a) if a in ("hosts.yml", "book.yml") else a for a in args]
        return _cli(capsys, monkeypatch, *given)

    return sink


def _error_message(folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """An error that quotes a value: --host names a host that is not there."""
    return _cli(capsys, monkeypatch, "inventory", "-i", str(folder / "hosts.yml"), "--host", f"x{DB}")


def _with_mask_of_a_run(folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The files below are written by long-running commands (watch, rollout) after their
    runs rendered the secrets: the mask as a `rigger run` of the playbook leaves it."""
    monkeypatch.setenv("RIGGER_MASK_HF", HF)
    from engine.inventory import load_inventory
    from engine.plans.commands import scrubber_for
    from engine.playbook.loader import load_playbook

    scrubber_for(load_playbook(str(folder / "book.yml")), load_inventory((str(folder / "hosts.yml"),)), {})


def _journal(folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    _with_mask_of_a_run(folder, capsys, monkeypatch)
    journal = Journal(folder / "watch" / "events.jsonl")
    journal.record("drift", host="localhost", diff=[f"- {HF}", f"+ {SECRETS['base64 of bob:app_pass']}"], msg=BOB)
    journal.close()
    return (folder / "watch" / "events.jsonl").read_text()


def _watch_state(folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    _with_mask_of_a_run(folder, capsys, monkeypatch)
    state = watch_store.WatchState(hosts={"localhost": watch_store.HostState(detail=f"vLLM said {HF} and {SPACED}")})
    watch_store.save(state, folder / "watch")
    return (folder / "watch" / "state.json").read_text()


def _rollout_record(folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    _with_mask_of_a_run(folder, capsys, monkeypatch)
    monkeypatch.setenv("RIGGER_STATE_DIR", str(folder / "state"))
    record = {"kind": "rigger-rollout", "id": "r1", "hosts": [{"host": "localhost", "log": f"token {HF} {DB}"}]}
    path = BaselineStore(folder / "state" / "baselines.sqlite").record_rollout("r1", "done", record)
    shown = _cli(capsys, monkeypatch, "show", str(path), "--format", "html")
    return path.read_text() + shown


SINKS: dict[str, Sink] = {
    "run (console, with diffs)": _run("--diff"),
    "run --check --diff": _run("--check", "--diff"),
    "run -v (task data)": _run("-v"),
    "run --output jsonl (events)": _run("--output", "jsonl", "--diff"),
    "plan (console)": _plan_console,
    "plan file": _plan_file,
    "show text": _show("text"),
    "show markdown": _show("markdown"),
    "show html": _show("html"),
    "inventory --list": _command("inventory", "-i", "hosts.yml"),
    "inventory --host": _command("inventory", "-i", "hosts.yml", "--host", "localhost"),
    "facts": _command("facts", "-i", "hosts.yml"),
    "validate": _command("validate", "book.yml", "-i", "hosts.yml"),
    "run --list-tasks": _command("run", "book.yml", "-i", "hosts.yml", "--list-tasks"),
    "error message": _error_message,
    "watch journal": _journal,
    "watch state.json": _watch_state,
    "rollout record and its show": _rollout_record,
}

# CLI commands whose output is covered by the sinks above, or that print no variable value
COVERED = {
    "run": "run (console, with diffs)",
    "plan": "plan (console)",
    "show": "show html",
    "inventory": "inventory --list",
    "facts": "facts",
    "validate": "validate",
    # these print through the same masked stdout/stderr (cli._invoke) and hold no variables
    "apply": "the plan console sink: apply prints the same events as run",
    "watch": "watch journal",
    "watch-status": "watch state.json",
    "watch-resume": "watch state.json",
    "baselines": "rollout record and its show",
    "quarantine": "the masked stdout of cli._invoke",
    "modules": "no variables",
    "doc": "no variables",
}


@pytest.mark.parametrize("name", SINKS)
def test_no_secret_is_readable_in_any_output(
    name: str, files: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    written = SINKS[name](files, capsys, monkeypatch)
    assert written.strip(), f"{name}: wrote nothing (the sink is not exercised)"
    readable = [what for what, value in SECRETS.items() if value in written]
    assert not readable, f"{name} shows {readable}:\n{written[:3000]}"


def test_every_cli_command_has_a_sink() -> None:
    commands = set(cli.cli.commands)
    assert commands <= set(COVERED), f"commands with no mask check: {sorted(commands - set(COVERED))}"


def test_a_multi_line_secret_is_masked_line_by_line() -> None:
    """A diff prints a PEM key a line at a time: each line is masked on its own."""
    key = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n-----END KEY-----"
    local = mask.Mask()
    local.add(key, "private_key")
    assert "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" not in local.text("+MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n")


def test_secrets_are_rendered_ahead_only_where_nothing_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Secrets made by pure lookups (env) are known before any output; one that reads a
    ``pipe`` lookup, even through another variable, is left for the run to render."""
    from engine.templating import record_secrets

    monkeypatch.setenv("RIGGER_MASK_ENV", "envtok-8675309")
    ran = tmp_path / "ran"
    record_secrets(
        {
            "hf_token": "{{ lookup('env', 'RIGGER_MASK_ENV') }}",
            "api_token": "{{ raw }}",
            "raw": f"{{{{ lookup('pipe', 'touch {ran}') }}}}",
        }
    )
    assert mask.MASK.text("envtok-8675309") == "<hidden: hf_token>"
    assert not ran.exists(), "a pipe lookup ran while recording secrets"


def test_a_string_computed_from_a_secret_is_masked_whatever_the_filter() -> None:
    from engine.templating import Scope, render

    scope = Scope({"db_password": "Tr0ub4dor-x", "shout": "{{ db_password | upper | reverse }}"}, {})
    shouted = render("{{ shout }}", scope)
    assert shouted == "X-ROD4BU0RT"
    assert mask.MASK.text(f"got {shouted}") == "got <hidden: db_password>"
    assert mask.MASK.text("cannot log in with Tr0ub4dor-x") == "cannot log in with <hidden: db_password>"


def test_an_ascii_terminal_gets_the_mask_too(files: Path) -> None:
    """click writes to the bytes below a stream whose encoding is ASCII: that went around
    the masked stdout (`rigger inventory` printed db_password). A process of its own: the
    encoding of stdout is chosen when the interpreter starts."""
    from tests.conftest import run_rigger_process

    run = run_rigger_process("inventory", "-i", str(files / "hosts.yml"), env={"PYTHONIOENCODING": "ascii"})
    assert run.rc == 0, run.stderr
    assert "<hidden: db_password>" in run.stdout and DB not in run.stdout and BOB not in run.stdout


def test_a_secret_named_result_masks_the_answer_not_rigger_s_words() -> None:
    """`register: token_check` holds the host's answer and rigger's own words (the host
    name, "non-zero return code"): only the answer is secret, or every later line naming
    the host would read <hidden: token_check>."""
    from engine.templating import Scope

    result = {"changed": False, "rc": 1, "msg": "non-zero return code", "stdout": "tok-5551212", "host": "gpu01"}
    Scope({}, {"token_check": result})["token_check"]
    assert mask.MASK.text("ok: [gpu01]: non-zero return code") == "ok: [gpu01]: non-zero return code"
    assert mask.MASK.text("tok-5551212") == "<hidden: token_check>"

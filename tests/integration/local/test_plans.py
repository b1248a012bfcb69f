"""Saved plans on the local connection: `rigger plan`, `rigger show`, `rigger apply`.

Real: the rigger CLI (in the test process; its own process where a run must see the fake
GPUs), every module's plan and apply, files, directories,
processes (started here, really signalled), a pip venv whose package pip really upgrades,
/proc. Not real: the GPUs (tests/fakes/fake_nvml lists the processes we register while
they live). Segment cleaning needs a tmpfs, so it is planned in test_plan_review.py's
private /dev/shm and not applied here. The `vllm` distribution in
the venv is a wheel built here (only its version matters: serve_vllm's plan reads it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakenvml
import pytest
from gpudecoys import gpu_holder_argv, wait_holding
from wheels import fake_wheel, pip_install

REPO = Path(__file__).resolve().parents[3]
FIXTURE = REPO / "tests" / "fixtures" / "kimi-k2.5-nvfp4"
CHANGES_PENDING = 10


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def start_time(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class Decoys:
    """Processes this test starts (and the fake GPUs list); whatever is left is killed."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str) -> int:
        # a proven holder, as on a real host: the decoy /dev/nvidia0 open (gpudecoys)
        proc = subprocess.Popen(
            gpu_holder_argv(["bash", "-c", f"exec -a {name} sleep 600"]),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.procs.append(proc)
        return wait_holding(proc.pid)

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def decoys() -> Iterator[Decoys]:
    spawned = Decoys()
    yield spawned
    spawned.cleanup()


@pytest.fixture
def fake(tmp_path: Path) -> Any:
    return fakenvml.create(tmp_path / "nvml")


def hold_gpus(fake: Any, pids: list[int]) -> None:
    fake.eight_gpus([fakenvml.holder(pid, n % 8, 40_000) for n, pid in enumerate(pids)])


def plan(rigger: Any, playbook: Path, out: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return rigger("plan", str(playbook), "-o", str(out), *args, env=env)


def apply(rigger: Any, plan_file: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return rigger("apply", str(plan_file), *args, env=env)


def show(rigger: Any, plan_file: Path, fmt: str = "text") -> str:
    done = rigger("show", str(plan_file), "--format", fmt)
    assert done.rc == 0, done.stderr
    return str(done.stdout)


# ---- the whole story: plan, review, apply exactly that ------------------------------


def the_host(root: Path) -> None:
    """Files of a host that needs every kind of change."""
    shutil.copytree(FIXTURE, root / "model")
    (root / "app.conf").write_text("port=1\n")
    (root / "untouched.conf").write_text("left alone\n")
    old = root / "old-weights"
    old.mkdir()
    (old / "w.safetensors").write_bytes(b"\0" * 4096)


def full_playbook(root: Path) -> Path:
    return write(
        root / "site.yml",
        f"""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: GPUs idle
              ensure_gpus_idle:
                term_timeout_s: 2
                timeout_s: 20
            - name: old weights gone
              ensure_absent:
                path: {root}/old-weights
            - name: FP8 KV removed
              patch_quant_config:
                path: {root}/model
                kv_cache_dtype: auto
            - name: app config
              write_file:
                path: {root}/app.conf
                content: "port=2\\n"
                backup: false
        """,
    )


def test_plan_then_apply_changes_exactly_the_planned_things(
    rigger: Any, digest: Any, tmp_path: Path, fake: Any, decoys: Decoys
) -> None:
    root = tmp_path / "host"
    root.mkdir()
    the_host(root)
    holders = [decoys.start("VLLM::EngineCore"), decoys.start("VLLM::Worker_TP0")]
    bystander = decoys.start("bystander")
    hold_gpus(fake, holders)
    book = full_playbook(root)
    before = digest(root)

    planned = plan(rigger, book, tmp_path / "plan.json", "--detailed-exitcode", env=fake.env())
    assert planned.rc == CHANGES_PENDING, planned.stdout + planned.stderr
    assert digest(root) == before and all(alive(p) for p in holders), "plan changed nothing"
    saved = json.loads((tmp_path / "plan.json").read_text())
    steps = {s["task"]: s for s in saved["hosts"][0]["steps"]}
    assert all(steps[t]["planned"] == "change" for t in steps), steps
    assert set(steps["GPUs idle"]["fingerprint"]) == {f"process:{p}" for p in holders}
    assert steps["GPUs idle"]["fingerprint"][f"process:{holders[0]}"].startswith(f"start_time {start_time(holders[0])}")

    applied = apply(rigger, tmp_path / "plan.json", env=fake.env())
    assert applied.rc == 0, applied.stdout + applied.stderr
    assert "applied 4 reviewed changes" in applied.stdout
    after = digest(root)
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    assert changed == {
        "app.conf",
        "model/config.json",
        "model/config.json.rigger-orig",
        "model/hf_quant_config.json",
        "model/hf_quant_config.json.rigger-orig",
        "old-weights",
        "old-weights/w.safetensors",
    }, changed
    assert not any(alive(p) for p in holders) and alive(bystander)

    again = plan(rigger, book, tmp_path / "again.json", "--detailed-exitcode", env=fake.env())
    assert again.rc == 0, "a converged host plans nothing: " + again.stdout
    assert "Nothing to change." in show(rigger, tmp_path / "again.json")


# ---- drift between the review and the apply -------------------------------------------


def patch_and_write(root: Path) -> Path:
    shutil.copytree(FIXTURE, root / "model")
    (root / "app.conf").write_text("port=1\n")
    return write(
        root / "site.yml",
        f"""\
        - hosts: localhost
          gather_facts: false
          vars_files: [{root}/vars.yml]
          tasks:
            - name: app config
              write_file:
                path: {root}/app.conf
                content: "port={{{{ app_port }}}}\\n"
                backup: false
            - name: FP8 KV removed
              patch_quant_config:
                path: {root}/model
                kv_cache_dtype: auto
        """,
    )


@pytest.fixture
def drift_host(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    root.mkdir()
    (root / "vars.yml").write_text("app_port: 2\n")
    patch_and_write(root)
    return root


def test_a_file_edited_since_the_plan_stops_the_host_naming_it(rigger: Any, tmp_path: Path, drift_host: Path) -> None:
    root = drift_host
    assert plan(rigger, root / "site.yml", tmp_path / "plan.json").rc == 0
    config = root / "model" / "config.json"
    edited = config.read_text().replace('"NVFP4"', '"NVFP4" ', 1)
    config.write_text(edited)

    done = apply(rigger, tmp_path / "plan.json")
    assert done.rc == 2, done.stdout + done.stderr
    assert f"file:{config}: was sha256:" in done.stdout, done.stdout
    assert config.read_text() == edited, "the drifted file was not touched"
    assert not (root / "model" / "config.json.rigger-orig").exists()
    assert (root / "app.conf").read_text() == "port=2\n", "the reviewed task before the drift was applied"


def test_a_process_started_since_the_plan_is_never_signalled(
    rigger: Any, tmp_path: Path, fake: Any, decoys: Decoys
) -> None:
    book = write(
        tmp_path / "gpus.yml",
        """\
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: GPUs idle
              ensure_gpus_idle: {term_timeout_s: 2, timeout_s: 10}
        """,
    )
    first = decoys.start("VLLM::EngineCore")
    hold_gpus(fake, [first])
    assert plan(rigger, book, tmp_path / "plan.json", env=fake.env()).rc == 0
    second = decoys.start("VLLM::Worker_TP1")
    hold_gpus(fake, [first, second])

    done = apply(rigger, tmp_path / "plan.json", env=fake.env())
    assert done.rc == 2, done.stdout + done.stderr
    assert f"process:{second}: new since the review" in done.stdout, done.stdout
    assert alive(first) and alive(second), "nothing outside the reviewed plan is signalled, nor inside it"


def test_a_package_upgraded_since_the_plan_stops_the_host(rigger: Any, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    pip_install(venv, fake_wheel(tmp_path, "vllm", "0.0.1"))
    model = tmp_path / "model"
    shutil.copytree(FIXTURE, model)
    state = tmp_path / "state"
    book = write(
        tmp_path / "serve.yml",
        f"""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: vLLM serves
              serve_vllm:
                name: plan-test
                model: {model}
                launcher: {venv}/bin/python
                port: 1
                state_dir: {state}
        """,
    )
    planned = plan(rigger, book, tmp_path / "plan.json", "--output", "jsonl")
    assert planned.rc == 0, planned.stdout + planned.stderr
    result = planned.results("vLLM serves")[0]
    assert result["fingerprint"]["package:vllm"] == "0.0.1", "--output jsonl carries the plan events"
    pip_install(venv, fake_wheel(tmp_path, "vllm", "0.0.2"))

    done = apply(rigger, tmp_path / "plan.json")
    assert done.rc == 2, done.stdout + done.stderr
    assert "package:vllm: was 0.0.1 at the review, now 0.0.2" in done.stdout, done.stdout
    assert not state.exists(), "nothing was launched"


def test_an_edited_playbook_or_vars_file_or_other_extra_vars_refuse_the_whole_apply(
    rigger: Any, digest: Any, tmp_path: Path, drift_host: Path
) -> None:
    root = drift_host
    before = digest(root)
    assert plan(rigger, root / "site.yml", tmp_path / "plan.json", "-e", "unused=1").rc == 0

    other_vars = apply(rigger, tmp_path / "plan.json", "-e", "unused=2")
    assert other_vars.rc == 1 and "the extra vars (-e) differ" in other_vars.stderr, other_vars.stderr

    (root / "vars.yml").write_text("app_port: 3\n")
    edited_vars = apply(rigger, tmp_path / "plan.json", "-e", "unused=1")
    assert edited_vars.rc == 1 and f"{root / 'vars.yml'}: edited since the plan" in edited_vars.stderr

    (root / "vars.yml").write_text("app_port: 2\n")
    with (root / "site.yml").open("a") as book:
        book.write("# reviewed? no\n")
    edited_book = apply(rigger, tmp_path / "plan.json", "-e", "unused=1")
    assert edited_book.rc == 1 and f"{root / 'site.yml'}: edited since the plan" in edited_book.stderr
    assert "Traceback" not in edited_book.stderr
    changed = {p for p, d in digest(root).items() if before.get(p) != d}
    assert changed == {"site.yml"}, "nothing applied"


def test_an_old_plan_is_refused(rigger: Any, tmp_path: Path, drift_host: Path) -> None:
    assert plan(rigger, drift_host / "site.yml", tmp_path / "plan.json").rc == 0
    saved = json.loads((tmp_path / "plan.json").read_text())
    saved["created_at"] -= 25 * 3600  # as if made yesterday
    (tmp_path / "plan.json").write_text(json.dumps(saved))

    done = apply(rigger, tmp_path / "plan.json")
    assert done.rc == 1 and "the plan is 1d 1h old, older than --max-age 1d: plan again" in done.stderr, done.stderr
    assert apply(rigger, tmp_path / "plan.json", "--max-age", "2d").rc == 0


# ---- several hosts: stop one, or all ------------------------------------------------------


def two_hosts(tmp_path: Path) -> tuple[Path, Path]:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "app.conf").write_text("port=1\n")
    inventory = write(
        tmp_path / "hosts.yml",
        """\
        all:
          vars: {ansible_connection: local}
          hosts:
            a: {}
            b: {}
        """,
    )
    book = write(
        tmp_path / "site.yml",
        f"""\
        - hosts: all
          gather_facts: false
          tasks:
            - name: app config
              write_file:
                path: "{tmp_path}/{{{{ inventory_hostname }}}}/app.conf"
                content: "port=2\\n"
                backup: false
        """,
    )
    return inventory, book


@pytest.mark.parametrize("on_drift", ["host", "all"])
def test_drift_on_one_host_stops_it_or_every_host(rigger: Any, tmp_path: Path, on_drift: str) -> None:
    inventory, book = two_hosts(tmp_path)
    assert plan(rigger, book, tmp_path / "plan.json", "-i", str(inventory), "--forks", "1").rc == 0
    (tmp_path / "a" / "app.conf").write_text("port=9\n")

    done = apply(rigger, tmp_path / "plan.json", "--on-drift", on_drift, "--forks", "1")
    assert done.rc == 2, done.stdout
    assert (tmp_path / "a" / "app.conf").read_text() == "port=9\n"
    other = (tmp_path / "b" / "app.conf").read_text()
    assert other == ("port=2\n" if on_drift == "host" else "port=1\n"), done.stdout


# ---- secrets -------------------------------------------------------------------------------

SECRETS = ("hunter2-db-pass", "tok-extra-5f3a9", "inv-become-pw-77", "nolog-literal-c0ffee")


def test_no_secret_reaches_the_plan_file_or_its_review(rigger: Any, tmp_path: Path) -> None:
    inventory = write(
        tmp_path / "hosts.yml",
        f"""\
        all:
          hosts:
            localhost:
              ansible_connection: local
              ansible_become_password: {SECRETS[2]}
        """,
    )
    book = write(
        tmp_path / "site.yml",
        f"""\
        - hosts: all
          gather_facts: false
          vars:
            db_password: {SECRETS[0]}
          tasks:
            - name: database config
              write_file:
                path: {tmp_path}/db.conf
                content: "password={{{{ db_password }}}}\\ntoken={{{{ api_token }}}}\\n"
            - name: a no_log task
              no_log: true
              write_file:
                path: {tmp_path}/nolog.txt
                content: {SECRETS[3]}
            - name: sudo password in a file, by mistake
              write_file:
                path: {tmp_path}/become.txt
                content: "{{{{ ansible_become_password }}}}"
        """,
    )
    extra = ("-e", f"api_token={SECRETS[1]}")
    planned = plan(rigger, book, tmp_path / "plan.json", "-i", str(inventory), *extra, "--output", "jsonl")
    assert planned.rc == 0, planned.stdout + planned.stderr
    texts = {
        "plan file": (tmp_path / "plan.json").read_text(),
        **{fmt: show(rigger, tmp_path / "plan.json", fmt) for fmt in ("text", "markdown", "html")},
    }
    for where, text in texts.items():
        leaked = [s for s in SECRETS if s in text]
        assert not leaked, f"{leaked} in the {where}"
    assert "password=<hidden: db_password>" in texts["plan file"]

    done = apply(rigger, tmp_path / "plan.json", *extra)
    assert done.rc == 0, done.stdout + done.stderr
    assert (tmp_path / "db.conf").read_text() == f"password={SECRETS[0]}\ntoken={SECRETS[1]}\n"
    assert (tmp_path / "nolog.txt").read_text() == SECRETS[3]


def test_a_no_log_step_that_changed_is_refused_without_saying_how(rigger: Any, tmp_path: Path) -> None:
    book = write(
        tmp_path / "site.yml",
        f"""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: token file
              no_log: true
              write_file:
                path: {tmp_path}/token.txt
                content: secret-token-value
        """,
    )
    (tmp_path / "token.txt").write_text("old-token-value")
    assert plan(rigger, book, tmp_path / "plan.json").rc == 0
    (tmp_path / "token.txt").write_text("other-token-value")

    done = apply(rigger, tmp_path / "plan.json")
    assert done.rc == 2
    assert "details hidden: no_log" in done.stdout, done.stdout
    assert "token-value" not in done.stdout
    assert (tmp_path / "token.txt").read_text() == "other-token-value"


# ---- drift detection for cron --------------------------------------------------------------


def test_detailed_exitcode_converged_drifted_and_failed(rigger: Any, tmp_path: Path, drift_host: Path) -> None:
    root = drift_host
    book = root / "site.yml"
    assert rigger("run", str(book)).rc == 0
    converged = plan(rigger, book, tmp_path / "p1.json", "--detailed-exitcode")
    assert converged.rc == 0, converged.stdout

    (root / "app.conf").write_text("port=3\n")  # someone edits the host
    drifted = plan(rigger, book, tmp_path / "p2.json", "--detailed-exitcode")
    assert drifted.rc == CHANGES_PENDING, drifted.stdout
    assert "app.conf" in show(rigger, tmp_path / "p2.json")
    assert plan(rigger, book, tmp_path / "p3.json").rc == 0, "without the flag, pending changes exit 0"

    shutil.rmtree(root / "model")
    failed = plan(rigger, book, tmp_path / "p4.json", "--detailed-exitcode")
    assert failed.rc == 2, "a failed task wins over pending changes"
    for fmt in ("text", "markdown", "html"):
        shown = rigger("show", str(tmp_path / "p4.json"), "--format", fmt)
        assert shown.rc == 2, (fmt, "an incomplete plan is no success")
        body = shown.stdout.split("<body>")[-1]  # html: the first thing in the body
        assert 0 <= body.find("INCOMPLETE: 1 host failed while planning") < 30, (fmt, body[:300])
    assert "FAILED while planning" in rigger("show", str(tmp_path / "p4.json")).stdout


# ---- paths as typed: a relative playbook, applied from elsewhere --------------------------


def test_a_plan_of_a_relative_playbook_applies_from_another_directory(rigger: Any, tmp_path: Path) -> None:
    """The README's `rigger plan playbooks/x.yml -o plan.json` then `rigger apply plan.json`,
    the apply run from another directory. Real: the CLI, write_file's plan and apply, files."""
    project = tmp_path / "project"
    (project / "playbooks").mkdir(parents=True)
    (tmp_path / "app.conf").write_text("port=1\n")
    write(
        project / "playbooks" / "site.yml",
        f"""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: app config
              write_file:
                path: {tmp_path}/app.conf
                content: "port=2\\n"
                backup: false
        """,
    )
    planned = rigger("plan", "playbooks/site.yml", "-o", "plan.json", cwd=project)
    assert planned.rc == 0, planned.stdout + planned.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    done = rigger("apply", str(project / "plan.json"), cwd=elsewhere)
    assert done.rc == 0, done.stdout + done.stderr
    assert "applied 1 reviewed changes" in done.stdout, done.stdout
    assert (tmp_path / "app.conf").read_text() == "port=2\n"


# ---- predicted state: a later task plans against what the earlier ones would leave ---------


# How the second task reads app.conf: from the host (remote_src), or from the controller,
# which on a local connection is the host (engine/controller_files.py).
COPY_READERS = {
    "copy remote_src": "copy:\n    src: {d}/app.conf\n    remote_src: true\n    dest: {d}/copy.conf",
    "copy src": "copy:\n    src: {d}/app.conf\n    dest: {d}/copy.conf",
    "template src": "template:\n    src: {d}/app.conf\n    dest: {d}/copy.conf",
    "write_file template": "write_file:\n    template: {d}/app.conf\n    path: {d}/copy.conf",
    "lookup file": "copy:\n    content: \"{{{{ lookup('file', '{d}/app.conf', rstrip=False) }}}}\"\n"
    "    dest: {d}/copy.conf",
}


def write_then_copy(tmp_path: Path, reader: str = "copy remote_src") -> Path:
    (tmp_path / "app.conf").write_text("port=1\n")
    second = textwrap.indent(COPY_READERS[reader].format(d=tmp_path), " " * 14).lstrip()
    return write(
        tmp_path / "site.yml",
        f"""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: app config
              write_file:
                path: {tmp_path}/app.conf
                content: "port=2\\n"
                backup: false
            - name: a copy of it
              {second}
        """,
    )


@pytest.mark.parametrize("reader", sorted(COPY_READERS))
def test_a_copy_of_a_file_an_earlier_task_writes_shows_and_applies_the_new_content(
    rigger: Any, digest: Any, tmp_path: Path, reader: str
) -> None:
    """Real: the CLI, write_file's and copy's/template's plan and apply, files. The copy's
    plan reads app.conf through the planning connection (remote_src), or from the
    controller, which is this host: either answers what write_file would leave."""
    book = write_then_copy(tmp_path, reader)
    before = digest(tmp_path)
    checked = rigger("run", str(book), "--check", "--diff")
    assert checked.rc == 0, checked.stdout + checked.stderr
    copy_diff = checked.stdout.split("TASK [a copy of it]")[1]
    assert "+port=2" in copy_diff and "port=1" not in copy_diff, checked.stdout
    assert plan(rigger, book, tmp_path / "plan.json").rc == 0
    assert {p for p, d in digest(tmp_path).items() if before.get(p) != d} == {"plan.json"}
    steps = json.loads((tmp_path / "plan.json").read_text())["hosts"][0]["steps"]
    copy_step = next(s for s in steps if s["task"] == "a copy of it")
    assert copy_step["diffs"][0]["after"] == "port=2\n", copy_step

    done = apply(rigger, tmp_path / "plan.json")
    assert done.rc == 0, done.stdout + done.stderr
    assert "applied 2 reviewed changes" in done.stdout, done.stdout
    assert (tmp_path / "copy.conf").read_text() == "port=2\n"


def command_then_copy(tmp_path: Path, script: str) -> Path:
    return write(
        tmp_path / "site.yml",
        f"""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: make the data
              command:
                argv: [sh, -c, "{script}"]
                creates: {tmp_path}/out/data.txt
            - name: publish it
              copy:
                src: {tmp_path}/out/data.txt
                remote_src: true
                dest: {tmp_path}/published.txt
        """,
    )


def test_a_step_that_reads_what_a_command_creates_is_known_after_apply_and_applies(rigger: Any, tmp_path: Path) -> None:
    """Real: the CLI, command and copy (plan and apply), files. The copy's source is what
    the command creates: unknowable while planning, so the plan says "known after apply"
    naming the command, and apply takes the fresh plan because it only adds a file."""
    book = command_then_copy(tmp_path, f"mkdir -p {tmp_path}/out && echo fresh > {tmp_path}/out/data.txt")
    assert plan(rigger, book, tmp_path / "plan.json").rc == 0
    steps = {s["task"]: s for s in json.loads((tmp_path / "plan.json").read_text())["hosts"][0]["steps"]}
    assert steps["publish it"]["planned"] == "after-apply", steps["publish it"]
    assert steps["publish it"]["depends_on"] == "make the data"
    assert "known after apply" in show(rigger, tmp_path / "plan.json")

    done = apply(rigger, tmp_path / "plan.json")
    assert done.rc == 0, done.stdout + done.stderr
    assert (tmp_path / "published.txt").read_text() == "fresh\n"


def test_a_known_after_apply_step_that_would_overwrite_what_existed_is_refused(rigger: Any, tmp_path: Path) -> None:
    """Real: as above. published.txt exists at the review and the plan could not say what
    would replace it: apply refuses to overwrite what nobody reviewed."""
    (tmp_path / "published.txt").write_text("reviewed by nobody\n")
    book = command_then_copy(tmp_path, f"mkdir -p {tmp_path}/out && echo fresh > {tmp_path}/out/data.txt")
    assert plan(rigger, book, tmp_path / "plan.json").rc == 0

    done = apply(rigger, tmp_path / "plan.json")
    assert done.rc == 2, done.stdout + done.stderr
    assert f"would change {tmp_path}/published.txt, which existed at the review" in done.stdout, done.stdout
    assert (tmp_path / "published.txt").read_text() == "reviewed by nobody\n"


# ---- incomplete plans ---------------------------------------------------------------------


def one_host_fails(tmp_path: Path) -> tuple[Path, Path]:
    """Host b fails the first task (its target is a directory), ignored, so its second
    task is planned after the failure."""
    inventory, _ = two_hosts(tmp_path)
    (tmp_path / "a" / "target").write_text("old\n")
    (tmp_path / "b" / "target").mkdir()
    book = write(
        tmp_path / "site.yml",
        f"""\
        - hosts: all
          gather_facts: false
          tasks:
            - name: target
              write_file:
                path: "{tmp_path}/{{{{ inventory_hostname }}}}/target"
                content: "new\\n"
                backup: false
              ignore_errors: true
            - name: app config
              write_file:
                path: "{tmp_path}/{{{{ inventory_hostname }}}}/app.conf"
                content: "port=2\\n"
                backup: false
        """,
    )
    return inventory, book


def test_an_incomplete_plan_is_refused_and_applies_only_to_the_hosts_named(rigger: Any, tmp_path: Path) -> None:
    """Real: the CLI, write_file's plan and apply, files and a directory in the way."""
    inventory, book = one_host_fails(tmp_path)
    planned = plan(rigger, book, tmp_path / "plan.json", "-i", str(inventory), "--detailed-exitcode")
    assert planned.rc == 2, "a host failed while planning, even if the run ignored it"
    assert "INCOMPLETE: 1 host failed while planning (b)" in planned.stdout + planned.stderr

    whole = apply(rigger, tmp_path / "plan.json")
    assert whole.rc == 1 and "INCOMPLETE: 1 host(s) failed while planning (b)" in whole.stderr, whole.stderr
    assert (tmp_path / "a" / "app.conf").read_text() == "port=1\n", "nothing applied"

    failed_host = apply(rigger, tmp_path / "plan.json", "--limit", "b")
    assert failed_host.rc == 2, failed_host.stdout
    assert "not in the reviewed plan" in failed_host.stdout, "b's step after its failure is never applied"
    assert (tmp_path / "b" / "app.conf").read_text() == "port=1\n"

    good_host = apply(rigger, tmp_path / "plan.json", "--limit", "all:!b")
    assert good_host.rc == 0, good_host.stdout + good_host.stderr
    assert (tmp_path / "a" / "app.conf").read_text() == "port=2\n"
    assert (tmp_path / "a" / "target").read_text() == "new\n"


@pytest.mark.parametrize("command", ["run", "plan", "apply"])
def test_a_limit_that_matches_nothing_is_the_same_error_everywhere(rigger: Any, tmp_path: Path, command: str) -> None:
    """ansible-playbook (ansible-core 2.19, .venv-ansible) exits 1 for a --limit that leaves
    no host: "Specified inventory, host pattern and/or --limit leaves us with no hosts to
    target". run, plan and apply say it in the same words, with the same exit code."""
    inventory, book = two_hosts(tmp_path)
    assert plan(rigger, book, tmp_path / "plan.json", "-i", str(inventory)).rc == 0
    args = {
        "run": ("run", str(book), "-i", str(inventory)),
        "plan": ("plan", str(book), "-i", str(inventory), "-o", str(tmp_path / "other.json")),
        "apply": ("apply", str(tmp_path / "plan.json"), "--lock-wait", "5"),
    }[command]
    done = rigger(*args, "--limit", "nosuchhost")
    assert done.rc == 1, done.stdout + done.stderr
    assert "--limit 'nosuchhost': the inventory, host pattern and --limit leave no hosts to target" in done.stderr
    assert "Traceback" not in done.stderr


def test_include_vars_of_a_file_an_earlier_task_writes_sees_the_new_values(rigger: Any, tmp_path: Path) -> None:
    """Real: the CLI, write_file's plan, include_vars and debug. On a local connection
    include_vars reads the controller's file, which is the host's: planned, it holds what
    write_file would leave."""
    (tmp_path / "vars.yml").write_text("port: 1\n")
    book = write(
        tmp_path / "site.yml",
        f"""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: new vars
              write_file:
                path: {tmp_path}/vars.yml
                content: "port: 2\\n"
                backup: false
            - include_vars:
                file: {tmp_path}/vars.yml
            - debug:
                msg: "port is {{{{ port }}}}"
        """,
    )
    checked = rigger("run", str(book), "--check")
    assert checked.rc == 0, checked.stdout + checked.stderr
    assert "port is 2" in checked.stdout and "port is 1" not in checked.stdout, checked.stdout
    assert (tmp_path / "vars.yml").read_text() == "port: 1\n"

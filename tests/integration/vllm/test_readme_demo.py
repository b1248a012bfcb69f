"""The README's first-run path, as written, on a copy of this checkout (issue 11), and the
demo playbook's whole life with one server start each way it can start (issue 29: these
were three tests and three servers).

`rigger run playbooks/demo_cpu.yml --check` first (it launches nothing and writes no
state), `./scripts/demo.sh`, `. .venv/bin/activate`, the two curl commands, a second run
(changed=0, same server), the stop command; then the README's
`rigger plan ... -o plan.json` and `rigger apply plan.json` from another directory (every
reviewed step applied, the server started again, nothing refused as drifted), the stop
again, then `bash scripts/clean.sh`.
Real: all of it - demo.sh making its own .venv with pip, the real CLI, vLLM CPU serving the
tiny model, curl, /proc and /dev/shm. Differences from a fresh clone: the copy links this
checkout's .venv-vllm (setup_vllm.sh finds it installed instead of downloading 3.5 GB), the
port and state directory are passed with -e (the README's `-e demo_port=N`,
`-e demo_state_dir=DIR`) so a server on 8000 is never touched, and clean.sh runs in a
private mount namespace (unshare -m; scratch /etc, /home, /tmp) so it cannot delete the
machine's SSH lab users.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllmkit import REPO, free_port, listening, live_session_members, require_vllm

pytestmark = pytest.mark.slow
README = (REPO / "README.md").read_text()
SEGMENT_PREFIXES = ("psm_", "sem.mp-")


def readme_line(start: str) -> str:
    """The README command starting with ``start``, as tests/unit/test_readme.py reads them."""
    spec = importlib.util.spec_from_file_location("test_readme", REPO / "tests" / "unit" / "test_readme.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return next(c for c in module.readme_commands(README) if c.startswith(start))


@pytest.fixture
def checkout() -> Iterator[Path]:
    """This checkout's tracked and unignored files, copied (no venvs), outside /tmp."""
    work = Path(tempfile.mkdtemp(prefix="rigger-readme-", dir="/var/tmp"))
    copy = work / "rigger"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, files):
        source = REPO / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    (copy / ".venv-vllm").symlink_to(require_vllm().parents[1].resolve())
    try:
        yield copy
    finally:
        shutil.rmtree(work, ignore_errors=True)


def sh(
    command: str, cwd: Path, timeout_s: float = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(["bash", "-c", command], cwd=cwd, env={**clean, **(env or {})}, capture_output=True,
                          text=True, timeout=timeout_s)  # fmt: skip


def activate_in(checkout: Path) -> str:
    """The README's activation, from any directory."""
    return f". {checkout}/.venv/bin/activate"


def jsonl(done: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def segments() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith(SEGMENT_PREFIXES)}


def test_demo_check_activate_query_rerun_stop_plan_apply_clean_as_the_readme_says(checkout: Path) -> None:
    port = free_port()
    state_dir = checkout.parent / "state"
    extra = f"-e demo_port={port} -e demo_state_dir={state_dir}"
    shm_before = segments()

    checked = sh(f"{sys.executable} -m engine.cli run playbooks/demo_cpu.yml --check {extra} --output jsonl",
                 checkout, env={"PYTHONPATH": str(checkout)})  # fmt: skip
    recap = jsonl(checked)[-1]
    assert recap["event"] == "recap" and recap["hosts"]["localhost"]["failed"] == 0, checked.stdout[-3000:]
    assert not state_dir.exists() and not listening(port), "check mode launched nothing and wrote no state"

    demo = sh(f"{readme_line('./scripts/demo.sh')} {extra}", checkout)
    assert demo.returncode == 0, demo.stdout[-4000:] + demo.stderr[-4000:]
    # check_serving fails on any error or below min_tokens_per_s (1): failed=0 and the figure
    # printed is the benchmark's proof
    assert "output tokens/s" in demo.stdout and "failed=0" in demo.stdout
    record = json.loads((state_dir / "demo-tiny-llama.json").read_text())
    pid = int(record["pid"])

    activate = readme_line(". .venv/bin/activate")
    which = sh(f"{activate} && command -v rigger", checkout)
    assert which.stdout.strip() == str(checkout / ".venv" / "bin" / "rigger"), which.stderr
    # The demo's venv has the fast tier's tools (no "No module named pytest"), and the
    # install said what it installs.
    assert "installing rigger and its test tools into .venv" in demo.stdout
    tools = sh(f"{activate} && python -m pytest -p xdist --version && ruff --version && mypy --version", checkout)
    assert tools.returncode == 0, tools.stdout + tools.stderr

    for start in ("curl -s localhost:8000/v1/models", "curl -s localhost:8000/v1/completions"):
        answer = sh(readme_line(start).replace("localhost:8000", f"localhost:{port}"), checkout, 120)
        assert answer.returncode == 0, answer.stderr
        body = json.loads(answer.stdout)
        assert body["data"][0]["id"] == "tiny" if "models" in start else body["choices"][0]["text"]

    again = sh(f"{activate} && {readme_line('rigger run playbooks/demo_cpu.yml')} {extra} --output jsonl", checkout)
    recap = jsonl(again)[-1]
    assert recap["event"] == "recap" and recap["hosts"]["localhost"]["changed"] == 0, again.stdout[-3000:]
    assert json.loads((state_dir / "demo-tiny-llama.json").read_text())["pid"] == pid

    stop = sh(f"{activate} && {readme_line('rigger run playbooks/demo_cpu.yml -e serve_state=stopped')} {extra}",
              checkout)  # fmt: skip
    assert stop.returncode == 0, stop.stdout[-3000:]
    assert live_session_members(pid) == [] and not listening(port)
    assert segments() <= shm_before, "the demo left shared-memory segments"

    # The README's reviewed plan, applied from another directory: every step it shows runs.
    plan_file = checkout.parent / "plan.json"
    planned = sh(f"{activate} && {readme_line('rigger plan playbooks/demo_cpu.yml')} {extra}".replace(
        "-o plan.json", f"-o {plan_file}"), checkout)  # fmt: skip
    assert planned.returncode == 0, planned.stdout[-3000:] + planned.stderr[-2000:]
    applied = sh(f"{activate_in(checkout)} && rigger apply {plan_file} {extra}", checkout.parent)
    output = applied.stdout + applied.stderr
    try:
        assert applied.returncode == 0, output[-4000:]
        assert "refused" not in output and "not applied" not in output, output[-4000:]
        assert listening(port)
    finally:
        sh(f"{activate} && rigger run playbooks/demo_cpu.yml -e serve_state=stopped {extra}", checkout)
    assert not listening(port)

    clean = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         'mount --make-rprivate / && cp -a /etc "$W/etc" && mount --bind "$W/etc" /etc'
         ' && mount -t tmpfs tmpfs /home && mkdir "$W/tmp" && mount --bind "$W/tmp" /tmp'
         f" && cd {checkout} && {readme_line('bash scripts/clean.sh')}"],
        env={**os.environ, "W": str(checkout.parent), "DEMO_STATE_DIR": str(state_dir)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert not any((checkout / name).exists() or (checkout / name).is_symlink()
                   for name in (".venv", ".venv-vllm", ".cache/demo"))  # fmt: skip
    assert require_vllm().exists(), "clean removed the link, not the venv it points to"
    assert not (state_dir / "demo-tiny-llama.json").exists()
    assert (checkout / "README.md").exists()

"""The commands of the README and of docs/*.md work as written, and each one is run by a test.

Real: the README and docs files, the real CLI (in the test process), the real inventory (whose
hosts are examples: unreachable here, which is what the README says), scripts/clean.sh on a
scratch copy of the checkout. The commands that need a running demo server or the whole suite
are run by slow tests (named in COVERED). A command is a line of a ```bash block.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from engine import registry
from tests.conftest import RiggerRun, run_rigger_process

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
DOCS = {path.relative_to(REPO).as_posix(): path.read_text() for path in sorted((REPO / "docs").rglob("*.md"))}

# Every command in a README ```bash block -> the test that runs it as written.
COVERED = {
    "rigger run playbooks/kimi_k25_nvfp4.yml -i inventory/fleet.yml --limit kimi_servers --check --diff":
        "test_fleet_command_targets_kimi_servers_only",
    "./scripts/demo.sh": "tests/integration/vllm/test_readme_demo.py",
    ". .venv/bin/activate": "tests/integration/vllm/test_readme_demo.py",
    "bash scripts/test.sh": ".ci/run (and tests/integration/test_readme_test_sh.py, a part)",
    "bash scripts/test.sh tests/unit": "tests/integration/test_readme_test_sh.py",
    "bash scripts/clean.sh": "tests/integration/vllm/test_readme_demo.py, tests/integration/test_clean_sh.py",
    "rigger modules": "test_tour_commands_run",
    "rigger doc ensure_gpus_idle": "test_tour_commands_run",
    "rigger facts": "test_tour_commands_run",
    "rigger validate playbooks/demo_cpu.yml": "test_tour_commands_run",
    "rigger run playbooks/demo_cpu.yml --check --diff": "test_tour_commands_run",
    "rigger run playbooks/demo_cpu.yml": "tests/integration/vllm/test_readme_demo.py",
    "curl -s localhost:8000/v1/models": "tests/integration/vllm/test_readme_demo.py",
    "curl -s localhost:8000/v1/completions -H 'Content-Type: application/json' "
    '-d \'{"model": "tiny", "prompt": "hello", "max_tokens": 16}\'': "tests/integration/vllm/test_readme_demo.py",
    "rigger run playbooks/demo_cpu.yml -e serve_state=stopped": "tests/integration/vllm/test_readme_demo.py",
    "rigger plan playbooks/demo_cpu.yml -o plan.json": "test_plan_and_show_commands_run",
    "rigger show plan.json --format markdown": "test_plan_and_show_commands_run",
    "rigger validate playbooks/vllm_group_cpu.yml -i inventory/vllm_group_cpu.yml": "test_tour_commands_run",
    "rigger validate playbooks/kimi_k25_two_nodes.yml -i inventory/fleet.yml": "test_tour_commands_run",
    # docs/watch.md: run there against a scratch inventory and --state-dir (the fleet's hosts are examples)
    "rigger watch playbooks/kimi_k25_nvfp4.yml -i inventory/fleet.yml --limit kimi_servers --interval 60 "
    "--max-repairs 3 --window 3600 --backoff 30 --metrics-port 9464": "tests/integration/local/test_watch.py",
    "rigger watch-status": "tests/integration/local/test_watch.py",
    "rigger watch-resume gpu-a01": "tests/integration/local/test_watch.py",
    "rigger watch-resume --fleet": "tests/integration/local/test_watch.py",
    "bash scripts/setup_fast_tier.sh": "tests/integration/test_readme_test_sh.py",
    'python -m pytest -m "not slow" -n auto --dist loadfile': "tests/integration/test_readme_test_sh.py",
    "bash scripts/lint.sh": "tests/integration/test_readme_test_sh.py",
}  # fmt: skip


def readme_commands(text: str = README) -> list[str]:
    """The commands of the ```bash blocks: continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        joined = re.sub(r"\\\n\s*", "", block)
        for line in joined.splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command and not command.startswith("#"):
                commands.append(re.sub(r"\s+", " ", command))
    return commands


def cli(command: str, timeout_s: float = 120) -> RiggerRun:
    """A README `rigger ...` line, run as written by the real CLI of this checkout, as on a
    machine where the demo has not run yet: a scratch HOME (no demo state file) and a
    network namespace of its own (nothing on port 8000), so a demo serving here now is not
    seen (issue 29)."""
    argv = shlex.split(command)
    assert argv[0] == "rigger", command
    with tempfile.TemporaryDirectory(prefix="rigger-readme-home-") as home:
        return run_rigger_process(*argv[1:], cwd=REPO, timeout_s=timeout_s, env={"HOME": home}, own_network=True)


def test_every_readme_and_docs_command_is_run_by_a_test() -> None:
    commands = readme_commands()
    assert "./scripts/demo.sh" in commands and "bash scripts/test.sh" in commands
    untested = [c for c in commands if c not in COVERED]
    assert not untested, f"README commands no test runs (add them to COVERED and a test): {untested}"
    pages = {"docs/ansible.md", "docs/plans.md", "docs/safety.md", "docs/multinode.md", "docs/benchmarks.md"}
    assert pages <= set(DOCS)
    for name, text in DOCS.items():
        untested = [c for c in readme_commands(text) if c not in COVERED]
        assert not untested, f"{name}: commands no test runs (add them to COVERED and a test): {untested}"
    for where in set(COVERED.values()):
        for name in re.findall(r"(?:^|, |\()((?:tests|\.ci)/[\w/.]+)", where):
            assert (REPO / name).exists(), name
        if where.startswith("test_"):
            assert where in globals(), where
    assert "scripts/test.sh" in (REPO / ".ci" / "run").read_text()


def test_readme_command_parser_sees_continuations_and_comments() -> None:
    text = "```bash\nfoo a \\\n    b   # note\n# only a comment\n```\n```\nnot bash\n```\n"
    assert readme_commands(text) == ["foo a b"]


def test_module_reference_is_current() -> None:
    """docs/modules/ is what scripts/gen_module_docs.py makes from the modules as they are now."""
    proc = subprocess.run([sys.executable, "scripts/gen_module_docs.py", "--check"], cwd=REPO,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stdout
    pages = {path.stem for path in (REPO / "docs" / "modules").glob("*.md")}
    assert pages == {*registry.module_names(), "README"}


def test_the_readme_fits_on_a_screen_and_links_pages_that_exist() -> None:
    assert len(README.splitlines()) <= 320
    for name, text in {"README.md": README, **DOCS}.items():
        base = (REPO / name).parent
        for target in re.findall(r"\]\(([^)#\s]+)\)", text):
            if "://" not in target:
                assert (base / target).exists(), f"{name} links {target}, which does not exist"


def test_tour_commands_run() -> None:
    for command in COVERED:
        if COVERED[command] != "test_tour_commands_run":
            continue
        done = cli(command)
        assert done.rc == 0, f"{command}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr
        # issue 30: a documented command whose play targets a group its inventory lacks
        assert "Could not match supplied host pattern" not in done.stderr and "targets no host" not in done.stderr
    assert "would start vLLM" in cli("rigger run playbooks/demo_cpu.yml --check --diff").stdout


def test_the_layout_section_names_every_engine_package_and_module() -> None:
    layout = README[README.index("## Layout") :]
    layout = layout[: layout.index("\n```\n", layout.index("```") + 3)]
    engine = REPO / "engine"
    parts = [p.name + "/" for p in engine.iterdir() if (p / "__init__.py").exists()]
    parts += [p.name for p in engine.glob("*.py") if p.name != "__init__.py"]
    missing = [part for part in sorted(parts) if not re.search(rf"(^|\s){re.escape(part)}(\s|$)", layout, re.M)]
    assert not missing, f"README's layout does not name {missing}"
    rooms = [p.name + "/" for p in (REPO / "modules").iterdir() if (p / "__init__.py").exists()]
    assert all(room in layout for room in rooms), rooms


def test_plan_and_show_commands_run(tmp_path: Path) -> None:
    """The plan file goes to a scratch directory (a user's own plan.json in the checkout stays)."""
    plan = tmp_path / "plan.json"
    for command in [c for c in COVERED if COVERED[c] == "test_plan_and_show_commands_run"]:
        done = cli(command.replace("plan.json", str(plan)))
        assert done.rc == 0, f"{command}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr
        # issue 30: a documented command whose play targets a group its inventory lacks
        assert "Could not match supplied host pattern" not in done.stderr and "targets no host" not in done.stderr
    assert plan.is_file()
    assert "### rigger plan: " in done.stdout and "would start vLLM" in done.stdout, done.stdout[-2000:]


def test_fleet_command_targets_kimi_servers_only() -> None:
    """The example hosts do not exist: every targeted host is unreachable (exit 3), and the
    one in maintenance is not targeted at all."""
    command = next(c for c in COVERED if "fleet.yml" in c)
    assert command in readme_commands()
    done = cli(command, timeout_s=300)
    assert done.rc == 3, done.stdout[-3000:] + done.stderr[-3000:]
    recap = done.stdout[done.stdout.index("PLAY RECAP") :]
    assert {"gpu-a01", "gpu-a02", "gpu-b01"} == set(re.findall(r"^(gpu-\w+) :", recap, re.MULTILINE))
    assert "gpu-a03" not in done.stdout + done.stderr
    assert "examples" in README[: README.index("## The two commands")]


def test_clean_dry_run_lists_only_what_the_setup_made(tmp_path: Path) -> None:
    """clean.sh -n on a scratch copy: lists the venvs and the demo's files, removes nothing."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts" / "ci").mkdir(parents=True)
    for script in ("scripts/clean.sh", "scripts/ci/common.sh"):
        shutil.copy(REPO / script, checkout / script)
    for made in (".venv/bin", ".venv-vllm/bin", ".venv-olah/bin", ".cache/demo/tiny-llama", ".cache/mine"):
        (checkout / made).mkdir(parents=True)
    home = tmp_path / "home"
    state = home / ".local/state/rigger/vllm"
    state.mkdir(parents=True)
    (state / "demo-tiny-llama.log").write_text("log")
    (state / "my-server.json").write_text("{}")
    # A test session's directory this checkout recorded making, and one it did not (another
    # checkout's, or a session running now elsewhere): only the first is listed.
    ours, theirs = (Path(tempfile.mkdtemp(prefix="rigger-test-state-")) for _ in range(2))
    (checkout / ".cache" / "rigger-test-dirs").write_text(f"{ours}\n")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    try:
        done = subprocess.run(["bash", str(checkout / "scripts/clean.sh"), "-n"], capture_output=True, text=True,
                              env={**os.environ, "HOME": str(home)}, timeout=60)  # fmt: skip
        assert ours.is_dir() and theirs.is_dir(), "-n removed a test-session directory"
    finally:
        ours.rmdir()
        theirs.rmdir()
    assert done.returncode == 0, done.stderr
    listed = [line.split(" ", 1)[1] for line in done.stdout.splitlines() if line.startswith("remove ")]
    assert listed[:5] == [
        str(state / "demo-tiny-llama.log"),
        str(ours),
        ".cache/rigger-test-dirs",
        ".venv",
        ".venv-vllm",
    ]
    assert ".cache/demo" in listed
    assert not any("my-server" in item or "mine" in item or item == str(theirs) for item in listed)
    assert not any("rigger-test-state" in item for item in listed if item != str(ours)), listed
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before, "-n removed something"

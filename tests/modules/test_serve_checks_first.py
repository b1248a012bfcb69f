"""serve_vllm refuses what cannot work before anything is stopped (no vLLM needed here).

Real: the module's schema as the engine validates it, the probes on the local host
(state file, path_info, port_owner), the real CLI for the exit code. The real-vLLM case
(a port move racing a foreign process) is in tests/integration/vllm/test_serve_lifecycle.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from ports import free_port

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.module_api import Change, TaskContext, TaskFailed
from modules.serving import serve_vllm


def args_for(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    """The module's arguments on a port nothing listens on (the README's demo may serve on
    the default 8000 here)."""
    spec = registry.get("serve_vllm")
    base = {"name": "t", "model": "/models/x", "state_dir": str(tmp_path / "state"), "port": free_port()}
    return spec.with_defaults({**base, **extra})


@pytest.mark.parametrize("key", ["model", "served_model_name", "host", "dtype", "kv_cache_dtype", "attention_backend"])
@pytest.mark.parametrize("value", ["--trust-remote-code", "-x", "--port=1"])
def test_a_value_that_would_read_as_a_flag_is_refused(tmp_path: Path, key: str, value: str) -> None:
    errors = list(registry.get("serve_vllm").validator.iter_errors(args_for(tmp_path, **{key: value})))
    assert [list(e.absolute_path) for e in errors] == [[key]], errors
    assert "does not match '^[^-]'" in errors[0].message


def test_a_model_directory_missing_on_the_host_fails_apply_and_is_named_by_the_plan(tmp_path: Path) -> None:
    # check mode: an earlier task (make_tiny_model, a download) may create the model, so the
    # plan names the gap instead of failing; apply refuses before it stops or starts anything.
    missing = tmp_path / "no-such-model"
    args = args_for(tmp_path, model=str(missing))
    planning = TaskContext("localhost", ScopedConnection(LocalConnection()).planning(), {}, {})
    change = serve_vllm.plan(planning, args)
    assert isinstance(change, Change)
    assert f"model {missing} is not on the host" in change.summary
    ctx = TaskContext("localhost", ScopedConnection(LocalConnection()), {}, {})
    with pytest.raises(TaskFailed, match=f"model {missing} is not on the host"):
        serve_vllm.apply(ctx, args, change)
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").iterdir())


def test_a_flag_shaped_model_exits_4_naming_the_line(rigger: Any, tmp_path: Path) -> None:
    book = tmp_path / "serve.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - serve_vllm:\n        name: x\n        model: --trust-remote-code\n"
    )
    run = rigger("run", str(book))
    assert run.rc == 4, run.stderr
    assert f"{book}:6: model: '--trust-remote-code' does not match" in run.stderr


def test_a_hung_collective_smoke_test_refuses_the_start_before_anything_is_stopped(tmp_path: Path) -> None:
    """The PCIe-only multi-GPU case (issue 32). Real: apply's order, the smoke test's probe
    and ranks. Not real: the GPUs (facts as ensure_gpus_healthy's NVML readings give them:
    no NVLink link up) and torch (tests/fakes/standin_torch, whose all_reduce hangs)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    port = free_port()
    standin = Path(__file__).resolve().parents[1] / "fakes" / "standin_torch"
    args = args_for(
        tmp_path,
        model=str(model),
        port=port,
        launcher=sys.executable,
        tensor_parallel_size=2,
        collective_smoke_timeout_s=1,
        env={"PYTHONPATH": str(standin), "STANDIN_TORCH": "hang"},
    )
    gpus = [{"index": i, "name": "NVIDIA RTX PRO 6000", "nvlink_links_up": 0} for i in range(2)]
    ctx = TaskContext("localhost", ScopedConnection(LocalConnection()), {"gpus": gpus}, {})
    with pytest.raises(TaskFailed, match=r"did not complete within 1 s \(hung.*NCCL_P2P_DISABLE"):
        serve_vllm.apply(ctx, args, Change("start vLLM"))
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").iterdir()), "nothing launched"

"""serve_vllm refuses what cannot work before anything is stopped (no vLLM needed here).

Real: the module's schema as the engine validates it, the probes on the local host
(state file, path_info, port_owner), the real CLI for the exit code. The real-vLLM case
(a port move racing a foreign process) is in tests/integration/vllm/test_serve_lifecycle.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.module_api import Change, TaskContext, TaskFailed
from modules.serving import serve_vllm


def args_for(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    spec = registry.get("serve_vllm")
    return spec.with_defaults({"name": "t", "model": "/models/x", "state_dir": str(tmp_path / "state"), **extra})


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

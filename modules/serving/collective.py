"""Before a multi-GPU start on a PCIe-only host: a bounded collective smoke test.

On PCIe-only GPUs (no NVLink; RTX PRO 6000 is PCIe) NCCL has hung on the first
all-reduce unless ``NCCL_P2P_DISABLE=1`` (local-inference-lab/rtx6kpro#15; the signature,
GPUs at 100 % utilisation at idle power with no log progress, in #21). A vLLM start that
hits it waits its whole readiness timeout. The smoke test (probe ``collective_smoke``, run
by the launcher's own interpreter so the torch and NCCL are the server's) does a 2-rank
all-reduce (one rank on a single-GPU start asked for with ``always``) on the GPUs the
server will use, with the serve environment, and kills it at a
deadline of seconds: a hang or a failure refuses the start before anything is stopped,
naming the remedy. On a host without CUDA the same harness runs with gloo on the CPU.

The topology is NVML's, as ensure_gpus_healthy reports it: the gathered GPU facts when they
carry the NVLink reading, else one ``gpu_health`` read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import ProbeError, TaskContext, TaskFailed
from modules.gpu.ensure_gpus_healthy import topology
from modules.serving.packages import launcher_python

P2P_VAR = "NCCL_P2P_DISABLE"
SOURCE = "local-inference-lab/rtx6kpro#15, #21"
# the probe's own deadline is the test's; the connection's is a backstop past it
TRANSPORT_MARGIN_S = 30.0
# two ranks find the P2P hang; a single-GPU start (collective_smoke: always) gets one, since
# NCCL cannot put two ranks on one GPU (a 1-rank NCCL all-reduce still proves NCCL comes up)
RANKS = 2


def world_size(args: Mapping[str, Any]) -> int:
    return int(args.get("tensor_parallel_size") or 1) * int(args.get("pipeline_parallel_size") or 1)


def _pcie_only(ctx: TaskContext) -> bool | None:
    gpus = ctx.facts.get("gpus") or []
    if not (gpus and all(isinstance(g, Mapping) and "nvlink_links_up" in g for g in gpus)):
        gpus = ctx.conn.run_probe("gpu_health", {"clock_reads": 1, "xid_wait_ms": 0}).get("gpus") or []
    pcie_only: bool | None = topology({"gpus": gpus})["pcie_only"]
    return pcie_only


def why_run(ctx: TaskContext, args: Mapping[str, Any]) -> str | None:
    """Why the smoke test runs before this start, or None when it does not."""
    mode = args["collective_smoke"]
    if mode == "never":
        return None
    if mode == "always":
        return "collective_smoke: always"
    if world_size(args) < 2:
        return None
    if _pcie_only(ctx):
        return f"{world_size(args)} GPUs, PCIe only (NVML: no NVLink link up)"
    return None


def _said(answer: Mapping[str, Any]) -> str:
    backend = answer.get("backend")
    devices = answer.get("visible_devices")
    where = f"CUDA_VISIBLE_DEVICES={devices}" if devices else "the first visible GPUs"
    if backend != "nccl":
        where = "the CPU"
    ranks = len(answer.get("ranks") or []) or RANKS
    return f"a {ranks}-rank all-reduce ({backend}, on {where}, torch {answer.get('torch_version')})"


def remedy(env: Mapping[str, str]) -> str:
    """What to do about a hung or failed collective, given the serve environment."""
    if str(env.get(P2P_VAR, "")).strip() == "1":
        return (
            f"the serve env already sets {P2P_VAR}=1, so it is not NCCL's P2P hang: rerun with "
            "NCCL_DEBUG=INFO in env, try NCCL_CUMEM_ENABLE=0 and --disable-custom-all-reduce, and "
            f"check the PCIe ACS / IOMMU settings (source: {SOURCE})"
        )
    return (
        f"on PCIe-only GPUs NCCL's P2P path can hang on the first all-reduce: declare "
        f'`env: {{{P2P_VAR}: "1"}}` in serve_vllm (the playbook\'s serve env) and run again '
        f"(source: {SOURCE})"
    )


def failure(answer: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """The refusal for a smoke test that did not pass, or None when it passed."""
    outcome = answer.get("outcome")
    if outcome == "passed":
        return None
    if outcome == "hung":
        what = f"did not complete within {answer.get('timeout_s'):g} s (hung; the ranks were killed)"
    else:
        errors = [f"rank {r['rank']}: {r['error']}" for r in answer.get("ranks") or [] if r.get("error")]
        wrong = [r for r in answer.get("ranks") or [] if r.get("value") is not None and r["value"] != r["expected"]]
        said = "; ".join(errors) or "; ".join(
            f"rank {r['rank']} summed {r['value']}, not {r['expected']}" for r in wrong
        )
        what = f"failed ({said or 'no rank answered'})"
    return f"collective smoke test before the start: {_said(answer)} {what}; {remedy(env)}"


def run_smoke(ctx: TaskContext, args: Mapping[str, Any], env: Mapping[str, str]) -> Mapping[str, Any] | None:
    """Run the smoke test where it is due; refuse the start when it does not pass. Returns
    the probe's answer with ``why`` (None when the test was not due)."""
    why = why_run(ctx, args)
    if why is None:
        return None
    python = launcher_python(str(args["launcher"]))
    if python is None:
        raise TaskFailed(
            f"collective smoke test ({why}): the launcher {args['launcher']!r} names no interpreter to run "
            "torch.distributed with; give launcher as a path (the venv's vllm or python), or "
            "collective_smoke: never",
            {"collective_smoke": {"why": why}},
        )
    timeout_s = float(args["collective_smoke_timeout_s"])
    ranks = min(RANKS, world_size(args))
    ctx.progress(f"collective smoke test ({why}): {ranks}-rank all-reduce, at most {timeout_s:g} s")
    request = {"ranks": ranks, "timeout_s": timeout_s, "backend": "auto", "env": dict(env)}
    try:
        answer = ctx.conn.run_probe_under(python, "collective_smoke", request, timeout_s=timeout_s + TRANSPORT_MARGIN_S)
    except ProbeError as exc:
        raise TaskFailed(f"collective smoke test ({why}): could not run under {python}: {exc}") from None
    answer = {**answer, "why": why}
    refused = failure(answer, env)
    if refused:
        raise TaskFailed(refused, {"collective_smoke": answer})
    return answer

"""Real-GPU check of ensure_gpus_idle: a torch process holds GPU memory, rigger frees it.

Run on a machine with an NVIDIA GPU, from the repository root (nothing to install into
the repo; rigger is imported from this checkout):

    python3 -m pip install nvidia-ml-py        # only if `python3 -c "import pynvml"` fails
    python3 scripts/gpu_device_check.py --gpu 0 --gib 4

Needs python3 with torch (CUDA build) and nvidia-ml-py. What it does:
0. health: reads every health field of the GPU straight through NVML (ECC, retired pages,
   remapped rows, clock event reasons, PCIe link, persistence mode, fabric, XID events)
   and prints each beside what rigger's gpu_health probe read and what ensure_gpus_healthy's
   verdict made of it, and the topology it reports (NVLink links up per GPU, P2P read status
   per pair) (`--health-only` stops after this, exit 0);
0b. collective: where this python's torch sees CUDA, rigger's collective_smoke probe (the
   bounded all-reduce serve_vllm runs before a multi-GPU start on a PCIe-only host) with
   NCCL: 2 ranks on GPUs 0 and 1, or 1 rank where there is one GPU (NCCL cannot put two ranks
   on one GPU), killed after --collective-timeout-s; prints the outcome and what serve_vllm
   would say (`--collective-only` stops after this: exit 0 passed, 1 not). Without torch
   with CUDA it says so and goes on;
1. reads the GPU through rigger's `gpus` probe (real NVML) for the idle baseline;
2. starts a child python that allocates --gib GiB on that GPU with torch and sleeps
   (its command line carries a marker; CUDA_DEVICE_ORDER=PCI_BUS_ID so the CUDA index
   is the NVML index);
3. waits until NVML lists the child on the GPU, prints NVML's view;
4. runs ensure_gpus_idle locally (plan in check mode, then apply, then plan again) with
   `only_patterns` set to the marker, so nothing but the child may be signalled;
5. prints NVML's view again and checks: child gone, no compute process, memory used
   back within --tolerance-mib of the baseline. Exit 0 = pass, 1 = fail, 2 = cannot run.
The last line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MARKER = "rigger-gpu-device-check"
CHILD = (
    "import sys, time, torch; gib, device = float(sys.argv[1]), 'cuda:' + sys.argv[2]; "
    "block = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=device); block.fill_(1); "
    "torch.cuda.synchronize(device); print('allocated', flush=True); time.sleep(900)"
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", type=int, default=0, help="NVML index of the GPU to use")
    parser.add_argument("--gib", type=float, default=4.0, help="GiB the child allocates")
    parser.add_argument(
        "--timeout-s", type=float, default=60.0, help="ensure_gpus_idle timeout_s (wait for idle after signals)"
    )
    parser.add_argument(
        "--term-timeout-s", type=float, default=10.0, help="ensure_gpus_idle term_timeout_s (SIGTERM -> SIGKILL)"
    )
    parser.add_argument(
        "--tolerance-mib", type=int, default=256, help="memory used may exceed the baseline by this much afterwards"
    )
    parser.add_argument(
        "--appear-timeout-s", type=float, default=120.0, help="how long to wait for NVML to list the child"
    )
    parser.add_argument("--health-only", action="store_true", help="only compare the health readings, then exit")
    parser.add_argument(
        "--collective-only", action="store_true", help="only the health readings and the NCCL smoke test, then exit"
    )
    parser.add_argument(
        "--collective-timeout-s",
        type=float,
        default=120.0,
        help="deadline of the NCCL smoke test (torch import included)",
    )
    args = parser.parse_args(argv)
    if args.gib <= 0 or args.gpu < 0:
        parser.error("--gib must be > 0 and --gpu >= 0")
    return args


def say(text: str) -> None:
    print(text, flush=True)


def rigger() -> Any:
    """rigger's pieces, imported from this checkout."""
    sys.path.insert(0, str(REPO))
    from engine.connection.base import ScopedConnection
    from engine.connection.local import LocalConnection
    from engine.module_api import Change, TaskContext, TaskFailed, Unchanged
    from modules.gpu import ensure_gpus_healthy, ensure_gpus_idle
    from modules.serving import collective

    return SimpleNamespace(
        collective=collective,
        ensure_gpus_healthy=ensure_gpus_healthy,
        ScopedConnection=ScopedConnection,
        LocalConnection=LocalConnection,
        Change=Change,
        TaskContext=TaskContext,
        TaskFailed=TaskFailed,
        Unchanged=Unchanged,
        ensure_gpus_idle=ensure_gpus_idle,
    )


def read_gpu(r: Any, index: int) -> dict[str, Any]:
    answer = r.LocalConnection().run_probe("gpus", {})
    if answer["backend"] != "nvml":
        raise SystemExit(
            f"cannot run: no NVIDIA GPU through NVML (backend "
            f"{answer['backend']}: {'; '.join(answer.get('notes', []))})"
        )
    for gpu in answer["gpus"]:
        if gpu["index"] == index:
            return dict(gpu)
    raise SystemExit(f"cannot run: no GPU {index}; there are {len(answer['gpus'])}")


# (field, the rules of ensure_gpus_healthy that judge it, how to read it raw through NVML)
HEALTH_FIELDS: list[tuple[str, tuple[str, ...], Any]] = [
    ("ecc_uncorrected_volatile", ("ecc-volatile",), lambda n, h: n.nvmlDeviceGetTotalEccErrors(h, 1, 0)),
    ("ecc_uncorrected_aggregate", ("ecc-aggregate",), lambda n, h: n.nvmlDeviceGetTotalEccErrors(h, 1, 1)),
    ("retired_pages_sbe", ("retired-pages",), lambda n, h: len(n.nvmlDeviceGetRetiredPages(h, 0))),
    ("retired_pages_dbe", ("retired-pages",), lambda n, h: len(n.nvmlDeviceGetRetiredPages(h, 1))),
    ("retired_pages_pending", ("retired-pages-pending",), lambda n, h: n.nvmlDeviceGetRetiredPagesPendingStatus(h)),
    (
        "remapped_rows",
        ("remapped-rows", "remapped-rows-pending", "remapped-rows-failure"),
        lambda n, h: n.nvmlDeviceGetRemappedRows(h),
    ),
    ("clocks_event_reasons", ("clock-events",), lambda n, h: hex(n.nvmlDeviceGetCurrentClocksEventReasons(h))),
    ("pcie_gen_current", ("pcie-gen",), lambda n, h: n.nvmlDeviceGetCurrPcieLinkGeneration(h)),
    ("pcie_gen_max", ("pcie-gen",), lambda n, h: n.nvmlDeviceGetMaxPcieLinkGeneration(h)),
    ("pcie_width_current", ("pcie-width",), lambda n, h: n.nvmlDeviceGetCurrPcieLinkWidth(h)),
    ("pcie_width_max", ("pcie-width",), lambda n, h: n.nvmlDeviceGetMaxPcieLinkWidth(h)),
    ("persistence_mode", ("persistence-mode",), lambda n, h: n.nvmlDeviceGetPersistenceMode(h)),
    ("fabric", ("fabric",), lambda n, h: _raw_fabric(n, h)),
]


def _raw_fabric(nvml: Any, handle: Any) -> str:
    import ctypes

    info = nvml.c_nvmlGpuFabricInfo_t()
    nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    return f"state {info.state} status {info.status}"


def raw_readings(index: int) -> dict[str, Any]:
    """Every health field read straight through nvidia-ml-py, apart from rigger's probe."""
    import pynvml as nvml

    nvml.nvmlInit()
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        raw: dict[str, Any] = {}
        for name, _, read in HEALTH_FIELDS:
            try:
                raw[name] = read(nvml, handle)
            except nvml.NVMLError as exc:
                raw[name] = f"NVML: {exc}"
        return raw
    finally:
        nvml.nvmlShutdown()


def health(r: Any, index: int) -> dict[str, Any]:
    """NVML's raw field, rigger's reading and the verdict's findings, field by field."""
    defaults = {k: v["default"] for k, v in r.ensure_gpus_healthy.SCHEMA["properties"].items()}
    planning = r.TaskContext("localhost", r.ScopedConnection(r.LocalConnection()).planning(), {}, {})
    verdict = r.ensure_gpus_healthy.plan(planning, {**defaults, "fail_on": "never", "quarantine": False})
    gpu = next(g for g in verdict.data["gpus"] if g["index"] == index)
    raw = raw_readings(index)
    rows = {}
    for name, rules, _ in HEALTH_FIELDS:
        found = [f for f in gpu["findings"] if f["rule"] in rules]
        judged = "; ".join(f"{f['severity']} [{f['rule']}] {f['evidence']}" for f in found) or "ok"
        rows[name] = {"nvml": raw[name], "rigger": gpu["readings"].get(name), "verdict": judged}
        say(f"[health] GPU {index} {name}: NVML {raw[name]} | rigger {gpu['readings'].get(name)} | {judged}")
    say(f"[health] GPU {index} xids (NVML events while listening): {gpu['readings'].get('xids')}")
    say(f"[health] host verdict: {verdict.msg}")
    topology = verdict.data["topology"]
    say(f"[topology] NVLink links up per GPU: {topology['nvlink_links_up']}; PCIe only: {topology['pcie_only']}")
    say(f"[topology] P2P read per pair: {topology['p2p_summary'] or 'none read'}")
    return {"verdict": verdict.data["verdict"], "gpu_verdict": gpu["verdict"], "fields": rows, "topology": topology}


CUDA_CHECK = "import json, torch; print(json.dumps([bool(torch.cuda.is_available()), torch.cuda.device_count()]))"


def collective(r: Any, timeout_s: float) -> dict[str, Any]:
    """rigger's collective_smoke probe with NCCL, where this python's torch sees CUDA."""
    seen = subprocess.run([sys.executable, "-c", CUDA_CHECK], capture_output=True, text=True, timeout=120, check=False)
    try:
        available, count = json.loads(seen.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        available, count = False, 0
    if not available or count < 1:
        why = (seen.stderr.strip().splitlines() or ["torch.cuda.is_available() is false"])[-1]
        say(f"[collective] skipped: no torch with CUDA in {sys.executable} ({why})")
        return {"outcome": "skipped", "why": why}
    ranks = min(2, int(count))
    request = {"ranks": ranks, "timeout_s": timeout_s, "backend": "nccl", "env": {}}
    conn = r.ScopedConnection(r.LocalConnection())
    answer: dict[str, Any] = conn.run_probe_under(sys.executable, "collective_smoke", request, timeout_s=timeout_s + 60)
    say(
        f"[collective] {ranks}-rank NCCL all-reduce: {answer['outcome']} in {answer['elapsed_s']} s "
        f"(torch {answer.get('torch_version')}, NCCL {answer.get('nccl_version')})"
    )
    for rank in answer["ranks"]:
        say(f"[collective] rank {rank['rank']} on {rank.get('device')}: value {rank.get('value')}, rc {rank['rc']}")
    refusal = r.collective.failure(answer, {})
    say(f"[collective] serve_vllm would say: {refusal or 'passed, the start goes on'}")
    return answer


def show(label: str, gpu: dict[str, Any]) -> None:
    procs = ", ".join(f"{p['pid']} {p.get('name')} {p['used_mib']} MiB" for p in gpu["processes"]) or "none"
    say(
        f"[{label}] GPU {gpu['index']} {gpu['name']} cc {gpu['compute_capability']}: "
        f"{gpu['memory_used_mib']} / {gpu['memory_total_mib']} MiB used; processes: {procs}"
    )


def start_child(args: argparse.Namespace) -> subprocess.Popen[str]:
    env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(args.gib), str(args.gpu), MARKER],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    if line != "allocated":
        child.wait(30)
        raise SystemExit(
            f"cannot run: the torch child did not allocate (exit {child.returncode}); is torch built with CUDA?"
        )
    return child


def wait_listed(r: Any, args: argparse.Namespace, pid: int, baseline: dict[str, Any]) -> dict[str, Any]:
    deadline = time.monotonic() + args.appear_timeout_s
    while True:
        gpu = read_gpu(r, args.gpu)
        if any(p["pid"] == pid for p in gpu["processes"]):
            return gpu
        if time.monotonic() > deadline:
            show("child not listed", gpu)
            before = {p["pid"] for p in baseline["processes"]}
            new = [p["pid"] for p in gpu["processes"] if p["pid"] not in before]
            hint = (
                f"NVML lists new pid(s) {new} instead: this script runs in another PID "
                "namespace than NVML reports (a container without --pid=host), so no "
                "tool here can map GPU holders to processes"
                if new
                else "NVML lists no new process at all"
            )
            raise SystemExit(f"cannot run: NVML never listed the child pid {pid}; {hint}")
        time.sleep(0.5)


def run_module(r: Any, args: argparse.Namespace, baseline_mib: int) -> dict[str, Any]:
    task_args = {
        "gpus": [args.gpu],
        "max_used_mib": baseline_mib + args.tolerance_mib,
        "term_timeout_s": args.term_timeout_s,
        "timeout_s": args.timeout_s,
        "kill_patterns": [],
        "protect_patterns": [],
        "only_patterns": [MARKER],
        "vllm_tree": True,
        "signal_other_users": False,
    }
    conn = r.ScopedConnection(r.LocalConnection())
    planning = r.TaskContext("localhost", conn.planning(), {}, {})
    change = r.ensure_gpus_idle.plan(planning, task_args)
    if not isinstance(change, r.Change):
        raise SystemExit(f"cannot run: ensure_gpus_idle found nothing to do: {change}")
    say(f"[check mode] would {change.summary}")
    started = time.monotonic()
    result = r.ensure_gpus_idle.apply(r.TaskContext("localhost", conn, {}, {}), task_args, change)
    say(f"[apply] {result.msg} ({time.monotonic() - started:.1f}s)")
    again = r.ensure_gpus_idle.plan(planning, task_args)
    say(f"[second plan] {'ok: ' + again.msg if isinstance(again, r.Unchanged) else again}")
    return {
        "args": task_args,
        "msg": result.msg,
        "data": dict(result.data),
        "second_plan_ok": isinstance(again, r.Unchanged),
    }


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        r = rigger()
        baseline = read_gpu(r, args.gpu)
        checked = health(r, args.gpu)
        if args.health_only:
            say(json.dumps({"health": checked}, default=str))
            return 0
        smoke = collective(r, args.collective_timeout_s)
        if args.collective_only:
            say(json.dumps({"health": checked, "collective": smoke}, default=str))
            return 0 if smoke["outcome"] in ("passed", "skipped") else 1
        show("baseline", baseline)
        child = start_child(args)
    except SystemExit as stop:
        say(str(stop))
        return 2
    try:
        busy = wait_listed(r, args, child.pid, baseline)
        show("child holds memory", busy)
        outcome = run_module(r, args, baseline["memory_used_mib"])
        after = read_gpu(r, args.gpu)
        show("after", after)
    except SystemExit as stop:
        say(str(stop))
        return 2
    except r.TaskFailed as failed:
        say(f"FAIL: ensure_gpus_idle failed: {failed}")
        return 1
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(30)
    checks = {
        "child_gone": child.returncode is not None and child.pid in outcome["data"]["killed_pids"],
        "no_compute_process": after["processes"] == [],
        "memory_back_to_baseline": after["memory_used_mib"] <= baseline["memory_used_mib"] + args.tolerance_mib,
        "idempotent": outcome["second_plan_ok"],
    }
    if smoke["outcome"] != "skipped":
        checks["collective_passed"] = smoke["outcome"] == "passed"
    summary = {
        "checks": checks,
        "baseline_mib": baseline["memory_used_mib"],
        "busy_mib": busy["memory_used_mib"],
        "after_mib": after["memory_used_mib"],
        "child_pid": child.pid,
        "child_exit": child.returncode,
        "gpu": {k: after[k] for k in ("index", "name", "uuid", "compute_capability", "memory_total_mib")},
        "killed_pids": outcome["data"]["killed_pids"],
        "mib_freed": outcome["data"]["mib_freed"],
        "seconds_waited": outcome["data"]["seconds_waited"],
        "health": checked,
        "collective": smoke,
    }
    say("PASS" if all(checks.values()) else f"FAIL: {[k for k, v in checks.items() if not v]}")
    say(json.dumps(summary, default=str))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

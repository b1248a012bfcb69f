"""Judge whether this host's GPUs are fit to serve: one verdict, serve, warn or refuse.

Reads, through NVML (nvidia-ml-py) with nvidia-smi as the fallback, the GPU count, model,
memory and compute capability against what the play declares (and what tensor parallel
needs), critical XID errors (NVML events while it listens, the kernel log since boot),
volatile and aggregate uncorrected ECC errors, retired pages (and pending retirements),
remapped rows (pending, failed), clock event reasons (thermal, power brake, HW slowdown:
a reason counts only when it is set in every one of `clock_reads` reads), current against
maximum PCIe link width and generation, persistence mode and, on NVSwitch systems, the
fabric manager's state. A reading the GPU does not support is "not supported", never 0.
It reports the topology too (`data.topology`: NVLink links up per GPU, `pcie_only`, P2P
read status per pair as NVML gives it): a fact, not a verdict - check_serving_compat's
PCIe rules act on it.

Every finding names its rule, the GPU, the evidence and the operator's next step (reset
the GPU, restart the fabric manager, reboot, drain and RMA). `data`: `verdict`,
`findings`, `gpus` (readings and findings per GPU), `rules` (findings per rule). A refuse
verdict fails the task (`fail_on`) and, with `quarantine`, marks the host quarantined on
the controller (serving tasks then skip it; `rigger quarantine clear HOST`) when a hardware
rule refused it: a host that only does not match the declared layout (GPU count, model,
memory, compute capability: a configuration mistake) is refused, never quarantined
(`data.configuration_mistake`); when more
than `max_refused_share` of the play's hosts are refused at once the run stops instead
(circuit breaker). Read-only: it runs whole in check mode (which records no quarantine).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import TaskContext, TaskFailed, Unchanged
from modules.gpu import health_rules

XID_LIST = {"type": "array", "items": {"type": "integer", "minimum": 0}}
REASONS = {"type": "array", "items": {"type": "string", "enum": sorted(health_rules.CLOCK_REASONS)}}
SEVERITY = {"type": "string", "enum": ["ignore", "warn", "refuse"]}
OPTIONAL_INT = {"type": ["integer", "null"], "minimum": 1}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "gpu_count": {
            **OPTIONAL_INT,
            "default": None,
            "description": "GPUs the play declares: fewer refuses, more warns. Null: at least one "
            "(a GPU play on a host without a readable GPU is refused, never 'ok: no GPUs').",
        },
        "tensor_parallel_size": {
            "type": "integer",
            "minimum": 1,
            "default": 1,
            "description": "The tensor parallel size the server will use: one GPU per rank, so fewer GPUs refuses.",
        },
        "gpu_model": {
            "type": ["string", "null"],
            "default": None,
            "description": "Text every GPU's name must contain (case-insensitive, e.g. `RTX PRO 6000`); null: any.",
        },
        "min_memory_mib": {
            **OPTIONAL_INT,
            "default": None,
            "description": "Memory every GPU must have (MiB, NVML's total); null: no minimum.",
        },
        "min_compute_capability": {
            "type": ["string", "null"],
            "pattern": "^[0-9]+\\.[0-9]+$",
            "default": None,
            "description": "The oldest compute capability the checkpoint runs on (e.g. `10.0` for NVFP4 "
            "kernels); an older or unreadable GPU refuses. Null: any.",
        },
        "max_ecc_uncorrected_volatile": {
            "type": "integer",
            "minimum": 0,
            "default": 0,
            "description": "Uncorrected ECC errors since the driver loaded above which the host is refused. "
            "Default 0: one uncorrected error already corrupted memory a kernel read; a reset clears it "
            "and retires or remaps the row.",
        },
        "max_ecc_uncorrected_aggregate": {
            "type": "integer",
            "minimum": 0,
            "default": 0,
            "description": "Lifetime uncorrected ECC errors above which the host warns. Default 0: any is "
            "worth knowing, but only a warning: past errors were already retired or remapped.",
        },
        "max_retired_pages": {
            "type": "integer",
            "minimum": 1,
            "default": 60,
            "description": "Retired pages (single + double bit) at which the GPU is refused for RMA; fewer "
            "warn. Default 60: NVIDIA's driver retires at most 64 pages per GPU, so near it new errors "
            "can no longer be retired.",
        },
        "refuse_xids": {
            **XID_LIST,
            "default": sorted(health_rules.XID_STEPS),
            "description": "XIDs that refuse the host; any other XID warns. Default: the hardware ones of "
            "NVIDIA's XID catalog (48 double-bit ECC, 63/64 row remap pending/failed, 74 NVLink, 79 fallen "
            "off the bus, 92 high SBE rate, 94/95 contained/uncontained ECC, 119/120 GSP, 140 unrecovered "
            "ECC); application faults such as 13 or 31 only warn.",
        },
        "throttle_warn": {
            **REASONS,
            "default": ["hw_power_brake", "hw_slowdown", "hw_thermal", "sw_thermal"],
            "description": "Clock event reasons that warn. Default: the thermal and hardware ones, which "
            "cost throughput and raise no XID; not sw_power_cap (normal under load) nor gpu_idle.",
        },
        "throttle_refuse": {
            **REASONS,
            "default": ["hw_thermal"],
            "description": "Clock event reasons that refuse. Default hw_thermal: the GPU's own thermal "
            "protection holding clocks down in every read means its cooling has failed. Power brake is "
            "only a warning: it has been seen set on most nodes of healthy clusters (NVSentinel #1666).",
        },
        "clock_reads": {
            "type": "integer",
            "minimum": 1,
            "default": 3,
            "description": "Reads of the clock event reasons; a reason counts only when set in every read "
            "(debounce: a one-off blip is not a finding).",
        },
        "clock_interval_s": {
            "type": "number",
            "minimum": 0,
            "default": 0.5,
            "description": "Seconds between those reads.",
        },
        "min_pcie_width_fraction": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 1,
            "default": 0.5,
            "description": "A link narrower than this share of its maximum width refuses; narrower than the "
            "maximum but not that narrow warns. Default 0.5: x4 or x8 of x16 quarters or halves the "
            "bandwidth weights load and PCIe all-reduce run at, and width does not drop to save power.",
        },
        "pcie_gen_below_max": {
            **SEVERITY,
            "default": "ignore",
            "description": "What a link generation below its maximum is. Default ignore: idle GPUs train the "
            "generation down to save power (read it under load before trusting it).",
        },
        "persistence_mode": {
            **SEVERITY,
            "default": "warn",
            "description": "What persistence mode off is. Default warn: the driver then tears the GPU down "
            "whenever no client holds it, so every start pays the init and settings can reset.",
        },
        "require_fabric": {
            "type": "boolean",
            "default": False,
            "description": "Refuse GPUs that report no NVLink fabric (set it on NVSwitch systems, where "
            "that means the fabric manager is missing). A fabric that is reported is always checked.",
        },
        "kernel_log_path": {
            "type": ["string", "null"],
            "default": None,
            "description": "A kernel log file to read XIDs from instead of `dmesg` / `journalctl -k -b`.",
        },
        "xid_wait_ms": {
            "type": "integer",
            "minimum": 0,
            "default": 200,
            "description": "How long to listen for NVML XID events (the kernel log holds the older ones).",
        },
        "fail_on": {
            "type": "string",
            "enum": ["refuse", "warn", "never"],
            "default": "refuse",
            "description": "Fail the task on a refuse verdict, on warn too, or never (register and branch).",
        },
        "max_refused_share": {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "default": 0.5,
            "description": "Fleet circuit breaker: when more than this share of the play's hosts (two at "
            "least) are refused in one run, the run stops before anything changes and none is quarantined. "
            "Default 0.5: when half a fleet fails at once, a shared cause (a driver rollout, a bad image) is "
            "likelier than that many broken GPUs, and quarantining them all would take the fleet down.",
        },
        "quarantine": {
            "type": "boolean",
            "default": True,
            "description": "A refuse verdict from a hardware rule quarantines the host on the controller, so "
            "serving tasks skip it in later runs until `rigger quarantine clear HOST`. A layout mismatch "
            "(GPU count, model, memory, compute capability) refuses without quarantine: a configuration mistake.",
        },
    },
}

PROBE_ARGS = ("kernel_log_path", "xid_wait_ms", "clock_reads", "clock_interval_s")


def _per_gpu(answer: Mapping[str, Any], found: list[health_rules.Finding]) -> list[dict[str, Any]]:
    gpus = []
    for gpu in answer.get("gpus") or []:
        mine = [f for f in found if f.gpu == gpu["index"]]
        gpus.append(
            {
                "index": gpu["index"],
                "uuid": gpu.get("uuid"),
                "name": gpu.get("name"),
                "memory_total_mib": gpu.get("memory_total_mib"),
                "compute_capability": gpu.get("compute_capability"),
                "pci_bus_id": gpu.get("pci_bus_id"),
                "nvlink_links_up": gpu.get("nvlink_links_up"),
                "readings": gpu.get("readings") or {},
                "unsupported": gpu.get("unsupported") or [],
                "verdict": health_rules.verdict(mine),
                "findings": [f.as_data() for f in mine],
            }
        )
    return gpus


def topology(answer: Mapping[str, Any]) -> dict[str, Any]:
    """NVLink links up per GPU and P2P read status per pair, as NVML gives them.
    ``pcie_only``: every GPU read and none with a link up (None: not read, e.g. nvidia-smi)."""
    links = {gpu["index"]: gpu.get("nvlink_links_up") for gpu in answer.get("gpus") or []}
    known = [n for n in links.values() if isinstance(n, int)]
    pairs = list(answer.get("p2p") or [])
    counts: dict[str, int] = {}
    for pair in pairs:
        counts[pair.get("read", "unsupported")] = counts.get(pair.get("read", "unsupported"), 0) + 1
    return {
        "nvlink_links_up": links,
        "pcie_only": (not any(known)) if links and len(known) == len(links) else None,
        "p2p": pairs,
        "p2p_summary": counts,
    }


def _topology_line(topo: Mapping[str, Any]) -> str:
    if topo["pcie_only"] is None:  # not read (nvidia-smi, a recorded answer): say nothing
        return ""
    link = "PCIe only (no NVLink link up)" if topo["pcie_only"] else "NVLink up"
    p2p = ", ".join(f"{count} pair(s) {read}" for read, count in sorted(topo["p2p_summary"].items()))
    return f"; topology: {link}" + (f", P2P read: {p2p}" if p2p else "")


def _summary(verdict: str, answer: Mapping[str, Any], found: list[health_rules.Finding]) -> str:
    count = len(answer.get("gpus") or [])
    backend = answer.get("backend")
    if verdict == "serve":
        return f"serve: {count} GPU(s) healthy ({backend}; every rule passed)"
    worst = [f for f in found if f.severity == verdict]
    shown = "; ".join(f.line() for f in worst[:6])
    more = f"; and {len(worst) - 6} more" if len(worst) > 6 else ""
    return f"{verdict}: {count} GPU(s) ({backend}): {shown}{more}"


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Unchanged:
    answer = ctx.conn.run_probe("gpu_health", {name: args[name] for name in PROBE_ARGS})
    found = health_rules.findings(answer, args)
    verdict = health_rules.verdict(found)
    rules: dict[str, list[dict[str, Any]]] = {}
    for finding in found:
        rules.setdefault(finding.rule, []).append(finding.as_data())
    data: dict[str, Any] = {
        "verdict": verdict,
        "findings": [f.as_data() for f in found],
        "gpus": _per_gpu(answer, found),
        "rules": rules,
        "backend": answer.get("backend"),
        "kernel_log": answer.get("kernel_log"),
        "notes": answer.get("notes") or [],
        "topology": topology(answer),
        "circuit_breaker": {"max_share": args["max_refused_share"]},
    }
    hardware = health_rules.hardware_refusals(found)
    if hardware and args["quarantine"]:
        reasons = sorted({f.rule for f in hardware})
        data["quarantine"] = {"reason": "GPU health refused: " + ", ".join(reasons)}
    msg = _summary(verdict, answer, found) + _topology_line(data["topology"])
    if verdict == "refuse" and not hardware:
        data["configuration_mistake"] = True
        msg += "; the host does not match the declared layout (a configuration mistake): not quarantined"
    failing = {"refuse": ("refuse",), "warn": ("refuse", "warn"), "never": ()}[args["fail_on"]]
    if verdict in failing:
        raise TaskFailed(msg, data)
    warnings = tuple(f"{f.severity} {f.line()}" for f in found)
    return Unchanged(msg=msg, data=data, warnings=warnings)

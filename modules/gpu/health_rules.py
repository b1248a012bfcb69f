"""The rules of ensure_gpus_healthy: the ``gpu_health`` probe's answer and the arguments
in, findings out. Pure (no host), so each rule is tested on readings alone.

A finding is one rule on one GPU (or the host): its severity (``warn`` or ``refuse``), the
evidence (the reading and the threshold it crossed) and the operator's next step. The
host's verdict is the worst severity: ``refuse``, ``warn``, else ``serve``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SEVERITY_ORDER = {"serve": 0, "warn": 1, "refuse": 2}

RESET = "reset the GPU (stop what runs on it, then `nvidia-smi -r -i {index}`), then run again"
REBOOT = "reboot the host (a GPU reset is not enough), then run again"
RMA = "drain the host and RMA the GPU (serial in `nvidia-smi -q -i {index}`)"
FABRIC = "restart the fabric manager (`systemctl restart nvidia-fabricmanager`); reboot if it stays unhealthy"
CHECK_DRIVER = "check the driver (`nvidia-smi`); a driver/library version mismatch needs a reboot"
RESEAT = "check the card's seating, riser and slot (a reboot retrains the link); RMA if it stays degraded"
COOLING = "check the GPU's cooling and power (fans, airflow, PSU); drain the host if it persists"
PERSISTENCE = "enable persistence mode (`nvidia-smi -pm 1`, or run nvidia-persistenced)"
DECLARE = "run the play on a host that has them, or change what the play declares"
# Rules that compare the host with what the play declares (count, model, memory, compute
# capability): a refusal there is a configuration mistake (the wrong host, or the wrong
# declaration), not a broken machine, so it refuses without quarantining the host. A GPU
# that fell off the bus also lowers the count, but its XID 79 (a hardware rule) quarantines.
LAYOUT_RULES = frozenset({"gpu-count", "gpu-model", "gpu-memory", "compute-capability"})
# What to do after an XID, by XID (NVIDIA's XID catalog); others: the application's error.
XID_STEPS = {
    48: RESET,  # double-bit ECC error
    63: RESET,  # row remapping pending
    64: RMA,  # row remapping failed
    74: RESET,  # NVLink error
    79: REBOOT,  # fallen off the bus
    92: RESET,  # high single-bit ECC rate
    94: RESET,  # contained ECC error
    95: REBOOT,  # uncontained ECC error
    119: REBOOT,  # GSP RPC timeout
    120: REBOOT,  # GSP error
    140: RESET,  # unrecovered ECC error
}
XID_OTHER = (
    "look at the process that caused it (XID {xid} is usually an application fault); reset the GPU if it repeats"
)
CLOCK_REASONS = {
    "gpu_idle": 0x1,
    "applications_clocks": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clocks": 0x100,
}
FABRIC_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    gpu: int | None
    evidence: str
    next_step: str

    def as_data(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "gpu": self.gpu,
            "evidence": self.evidence,
            "next_step": self.next_step,
        }

    def line(self) -> str:
        where = "host" if self.gpu is None else f"GPU {self.gpu}"
        return f"[{self.rule}] {where}: {self.evidence}; next: {self.next_step}"


Gpu = Mapping[str, Any]
Args = Mapping[str, Any]


def _finding(rule: str, severity: str, gpu: Gpu | None, evidence: str, step: str, **fmt: Any) -> Finding:
    index = None if gpu is None else gpu["index"]
    return Finding(rule, severity, index, evidence, step.format(index=index, **fmt))


def _reading(gpu: Gpu, name: str) -> Any:
    return (gpu.get("readings") or {}).get(name)


# ---- the host as a whole ----------------------------------------------------------------


def host_rules(answer: Mapping[str, Any], args: Args) -> list[Finding]:
    found: list[Finding] = []
    if answer.get("errors"):
        found.append(
            _finding("driver", "refuse", None, "cannot read the GPUs: " + "; ".join(answer["errors"]), CHECK_DRIVER)
        )
    gpus = answer.get("gpus") or []
    needed = max(args["gpu_count"] or 1, args["tensor_parallel_size"])
    if len(gpus) < needed:
        why = f"{len(gpus)} GPU(s) readable, the play needs {needed}"
        if args["tensor_parallel_size"] > 1:
            why += f" (tensor parallel {args['tensor_parallel_size']})"
        if not gpus:
            why += f" (backend {answer.get('backend')}: {'; '.join(answer.get('notes') or []) or 'no driver'})"
        found.append(_finding("gpu-count", "refuse", None, why, DECLARE))
    elif args["gpu_count"] and len(gpus) > args["gpu_count"]:
        found.append(
            _finding("gpu-count", "warn", None, f"{len(gpus)} GPUs, the play declares {args['gpu_count']}", DECLARE)
        )
    return found


# ---- per GPU -------------------------------------------------------------------------------


def _model(gpu: Gpu, args: Args) -> list[Finding]:
    wanted = args["gpu_model"]
    if wanted and wanted.lower() not in str(gpu.get("name") or "").lower():
        return [_finding("gpu-model", "refuse", gpu, f"{gpu.get('name')!r} is not a {wanted!r}", DECLARE)]
    return []


def _memory(gpu: Gpu, args: Args) -> list[Finding]:
    wanted, total = args["min_memory_mib"], gpu.get("memory_total_mib")
    if wanted and (total is None or total < wanted):
        return [_finding("gpu-memory", "refuse", gpu, f"{total} MiB total, the play needs {wanted} MiB", DECLARE)]
    return []


def _capability(text: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(part) for part in str(text).split("."))
    except ValueError:
        return None


def _compute_capability(gpu: Gpu, args: Args) -> list[Finding]:
    wanted = args["min_compute_capability"]
    if not wanted:
        return []
    have = _capability(gpu.get("compute_capability")) if gpu.get("compute_capability") else None
    if have is None or have < (_capability(wanted) or ()):
        shown = gpu.get("compute_capability") or "unknown"
        return [
            _finding(
                "compute-capability", "refuse", gpu, f"SM {shown}, the checkpoint needs SM {wanted} or newer", DECLARE
            )
        ]
    return []


def _xid(gpu: Gpu | None, xid: int, source: str, args: Args) -> Finding:
    severity = "refuse" if xid in args["refuse_xids"] else "warn"
    return _finding("xid", severity, gpu, f"XID {xid} {source}", XID_STEPS.get(xid, XID_OTHER), xid=xid)


def _xids(gpu: Gpu, args: Args) -> list[Finding]:
    return [_xid(gpu, xid, "reported by NVML", args) for xid in sorted(set(_reading(gpu, "xids") or []))]


def _ecc(gpu: Gpu, args: Args) -> list[Finding]:
    found = []
    volatile, aggregate = _reading(gpu, "ecc_uncorrected_volatile"), _reading(gpu, "ecc_uncorrected_aggregate")
    limit, lifetime_limit = args["max_ecc_uncorrected_volatile"], args["max_ecc_uncorrected_aggregate"]
    if volatile is not None and volatile > limit:
        evidence = f"{volatile} uncorrected ECC errors since the driver loaded (volatile; limit {limit})"
        found.append(_finding("ecc-volatile", "refuse", gpu, evidence, RESET))
    if aggregate is not None and aggregate > lifetime_limit:
        evidence = f"{aggregate} uncorrected ECC errors over the GPU's life (aggregate; limit {lifetime_limit})"
        found.append(_finding("ecc-aggregate", "warn", gpu, evidence, "watch retired pages and remapped rows; " + RMA))
    return found


def _retired_pages(gpu: Gpu, args: Args) -> list[Finding]:
    sbe, dbe = _reading(gpu, "retired_pages_sbe"), _reading(gpu, "retired_pages_dbe")
    found = []
    if _reading(gpu, "retired_pages_pending"):
        found.append(
            _finding("retired-pages-pending", "refuse", gpu, "page retirement pending (takes effect on reset)", RESET)
        )
    total = (sbe or 0) + (dbe or 0)
    if total >= args["max_retired_pages"]:
        evidence = f"{total} retired pages ({sbe} single-bit, {dbe} double-bit; limit {args['max_retired_pages']})"
        found.append(_finding("retired-pages", "refuse", gpu, evidence, RMA))
    elif total:
        found.append(
            _finding(
                "retired-pages",
                "warn",
                gpu,
                f"{total} retired pages ({sbe} single-bit, {dbe} double-bit)",
                "watch it; " + RMA,
            )
        )
    return found


def _remapped_rows(gpu: Gpu, args: Args) -> list[Finding]:
    rows = _reading(gpu, "remapped_rows")
    if not rows:
        return []
    if rows.get("failure"):
        return [_finding("remapped-rows-failure", "refuse", gpu, "row remapping failed (no spare rows left)", RMA)]
    if rows.get("pending"):
        return [
            _finding("remapped-rows-pending", "refuse", gpu, "row remapping pending (takes effect on reset)", RESET)
        ]
    if rows.get("uncorrected"):
        return [
            _finding(
                "remapped-rows",
                "warn",
                gpu,
                f"{rows['uncorrected']} rows remapped for uncorrectable errors",
                "watch it; " + RMA,
            )
        ]
    return []


def _clocks(gpu: Gpu, args: Args) -> list[Finding]:
    mask = _reading(gpu, "clocks_event_reasons")
    if not mask:
        return []
    active = [name for name, bit in CLOCK_REASONS.items() if mask & bit]
    for severity, names in (("refuse", args["throttle_refuse"]), ("warn", args["throttle_warn"])):
        hit = [name for name in active if name in names]
        if hit:
            evidence = f"clocks slowed by {', '.join(hit)} in all {args['clock_reads']} reads (mask {mask:#x})"
            return [_finding("clock-events", severity, gpu, evidence, COOLING)]
    return []


def _pcie(gpu: Gpu, args: Args) -> list[Finding]:
    found = []
    width, width_max = _reading(gpu, "pcie_width_current"), _reading(gpu, "pcie_width_max")
    if width is not None and width_max and width < width_max:
        severity = "refuse" if width < width_max * args["min_pcie_width_fraction"] else "warn"
        found.append(_finding("pcie-width", severity, gpu, f"PCIe link x{width} of x{width_max}", RESEAT))
    gen, gen_max = _reading(gpu, "pcie_gen_current"), _reading(gpu, "pcie_gen_max")
    if args["pcie_gen_below_max"] != "ignore" and gen is not None and gen_max and gen < gen_max:
        found.append(_finding("pcie-gen", args["pcie_gen_below_max"], gpu, f"PCIe gen {gen} of gen {gen_max}", RESEAT))
    return found


def _persistence(gpu: Gpu, args: Args) -> list[Finding]:
    if args["persistence_mode"] != "ignore" and _reading(gpu, "persistence_mode") is False:
        return [_finding("persistence-mode", args["persistence_mode"], gpu, "persistence mode is off", PERSISTENCE)]
    return []


def _fabric(gpu: Gpu, args: Args) -> list[Finding]:
    fabric = _reading(gpu, "fabric")
    if not fabric:
        if args["require_fabric"]:
            return [_finding("fabric", "refuse", gpu, "no NVLink fabric reported (not an NVSwitch GPU?)", FABRIC)]
        return []
    state, status = fabric.get("state"), fabric.get("status")
    name = FABRIC_STATES.get(state, f"state {state}")
    if state == 2:
        return [
            _finding("fabric", "warn", gpu, "fabric registration in progress", "wait a minute and run again; " + FABRIC)
        ]
    if state != 3 or status not in (0, None):
        return [_finding("fabric", "refuse", gpu, f"fabric {name}, status {status}", FABRIC)]
    return []


def _unreadable(gpu: Gpu, args: Args) -> list[Finding]:
    return [
        _finding("unreadable", "warn", gpu, f"cannot read {name}: {error}", CHECK_DRIVER)
        for name, error in sorted((gpu.get("read_errors") or {}).items())
    ]


GPU_RULES: tuple[Callable[[Gpu, Args], list[Finding]], ...] = (
    _model,
    _memory,
    _compute_capability,
    _xids,
    _ecc,
    _retired_pages,
    _remapped_rows,
    _clocks,
    _pcie,
    _persistence,
    _fabric,
    _unreadable,
)


def _pci_key(text: str | None) -> tuple[int, int, int] | None:
    """(domain, bus, device) of "00000000:3B:00.0" or the kernel's "0000:3b:00"."""
    if not text:
        return None
    parts = text.split(".")[0].split(":")
    try:
        return int(parts[-3], 16), int(parts[-2], 16), int(parts[-1], 16)
    except (IndexError, ValueError):
        return None


def kernel_rules(answer: Mapping[str, Any], args: Args) -> list[Finding]:
    by_pci = {_pci_key(g.get("pci_bus_id")): g for g in answer.get("gpus") or [] if g.get("pci_bus_id")}
    seen: set[tuple[Any, int]] = set()
    found = []
    for entry in answer.get("kernel_xids") or []:
        gpu = by_pci.get(_pci_key(entry["pci"]))
        key = (entry["pci"], entry["xid"])
        if key in seen:
            continue
        seen.add(key)
        source = f"in the kernel log since boot (PCI {entry['pci']}: {entry['text']})"
        found.append(_xid(gpu, entry["xid"], source, args))
    return found


def findings(answer: Mapping[str, Any], args: Args) -> list[Finding]:
    found = host_rules(answer, args) + kernel_rules(answer, args)
    for gpu in answer.get("gpus") or []:
        for rule in GPU_RULES:
            found.extend(rule(gpu, args))
    return found


def hardware_refusals(found: Iterable[Finding]) -> list[Finding]:
    """The refusing findings that say the machine is unfit (not the layout declared for it)."""
    return [f for f in found if f.severity == "refuse" and f.rule not in LAYOUT_RULES]


def verdict(found: Iterable[Finding]) -> str:
    worst = max((SEVERITY_ORDER[f.severity] for f in found), default=0)
    return next(name for name, rank in SEVERITY_ORDER.items() if rank == worst)

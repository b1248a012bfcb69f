"""Pure parsers for the GPU health readings nvidia-smi and the kernel log give.

No host access: ``main({"health_csv": ..., "remap_csv": ..., "query_text": ...,
"kernel_log": ...})`` turns recorded text into the readings the NVML path of the
``gpu_health`` probe produces (same names, same units), so they are tested against
recorded output with no GPU. A value nvidia-smi prints as ``[N/A]`` / ``N/A`` /
``[Not Supported]`` is None: not supported is not 0.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

# --query-gpu fields, in order, and the reading each becomes
HEALTH_FIELDS = (
    ("uuid", "uuid"),
    ("ecc.errors.uncorrected.volatile.total", "ecc_uncorrected_volatile"),
    ("ecc.errors.uncorrected.aggregate.total", "ecc_uncorrected_aggregate"),
    ("retired_pages.sbe", "retired_pages_sbe"),
    ("retired_pages.dbe", "retired_pages_dbe"),
    ("retired_pages.pending", "retired_pages_pending"),
    ("clocks_event_reasons.active", "clocks_event_reasons"),
    ("pcie.link.gen.current", "pcie_gen_current"),
    ("pcie.link.gen.max", "pcie_gen_max"),
    ("pcie.link.width.current", "pcie_width_current"),
    ("pcie.link.width.max", "pcie_width_max"),
    ("persistence_mode", "persistence_mode"),
)
# drivers before R535 name the clock event reasons "throttle reasons"
OLD_NAMES = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}
REMAP_FIELDS = (
    "gpu_uuid",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
)
BOOLEAN = {"retired_pages_pending", "persistence_mode"}
HEX = {"clocks_event_reasons"}
# "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+)(?:, (.*))?")
_FABRIC_STATE = {"not supported": 0, "not started": 1, "in progress": 2, "completed": 3}


def _value(text: str) -> str | None:
    text = text.strip()
    if not text or text.strip("[]").lower() in ("n/a", "not supported", "unknown error", "insufficient permissions"):
        return None
    return text


def _bool(text: str | None) -> bool | None:
    if text is None:
        return None
    return text.lower() in ("yes", "enabled", "1", "true", "pending")


def _number(text: str | None, base: int = 10) -> int | None:
    if text is None:
        return None
    try:
        return int(text, base) if base != 10 else int(float(text))
    except ValueError:
        return None


def _reading(name: str, text: str) -> Any:
    value = _value(text)
    if name == "uuid":
        return value
    if name in BOOLEAN:
        return _bool(value)
    if name in HEX:
        return _number(value, 16)
    return _number(value)


def _rows(text: str, width: int) -> list[list[str]]:
    out = []
    for row in csv.reader(io.StringIO(text or ""), skipinitialspace=True):
        if not row or not "".join(row).strip():
            continue
        if len(row) != width:
            raise ValueError(f"nvidia-smi row has {len(row)} fields, expected {width}: {row!r}")
        out.append(row)
    return out


def parse_health(text: str) -> dict[str, dict[str, Any]]:
    """``--query-gpu=<HEALTH_FIELDS> --format=csv,noheader,nounits`` -> readings by uuid."""
    readings: dict[str, dict[str, Any]] = {}
    for row in _rows(text, len(HEALTH_FIELDS)):
        gpu = {name: _reading(name, cell) for (_, name), cell in zip(HEALTH_FIELDS, row, strict=True)}
        readings[str(gpu.pop("uuid"))] = gpu
    return readings


def parse_remapped(text: str) -> dict[str, dict[str, Any] | None]:
    """``--query-remapped-rows=<REMAP_FIELDS> --format=csv,noheader`` -> rows by uuid."""
    found: dict[str, dict[str, Any] | None] = {}
    for uuid, corrected, uncorrected, pending, failure in _rows(text, len(REMAP_FIELDS)):
        values = [_value(cell) for cell in (corrected, uncorrected, pending, failure)]
        if all(v is None for v in values):
            found[uuid.strip()] = None
            continue
        found[uuid.strip()] = {
            "corrected": _number(values[0]),
            "uncorrected": _number(values[1]),
            "pending": _bool(values[2]),
            "failure": _bool(values[3]),
        }
    return found


def parse_fabric(query_text: str) -> dict[str, dict[str, Any] | None]:
    """The ``Fabric`` section of each GPU in ``nvidia-smi -q``: {"state", "status"} by uuid
    (state as NVML's NVML_GPU_FABRIC_STATE_* number, status 0 = success), None where the
    GPU has no fabric (``N/A``: not an NVSwitch system)."""
    found: dict[str, dict[str, Any] | None] = {}
    uuid, section = None, None
    fabric: dict[str, Any] = {}
    for raw in (query_text or "").splitlines():
        key, _, value = (part.strip() for part in raw.partition(":"))
        indent = len(raw) - len(raw.lstrip())
        if indent == 0 and key:  # "GPU 00000000:18:00.0": a new GPU
            uuid, section, fabric = None, None, {}
        elif indent == 4:  # a GPU-level line: a section header has no value
            section = key if not value else None
            if key == "GPU UUID":
                uuid = value
        elif section == "Fabric" and indent == 8 and key in ("State", "Status"):
            fabric[key] = _value(value)
        if uuid is not None and section == "Fabric":
            state = _FABRIC_STATE.get((fabric.get("State") or "").lower())
            status = fabric.get("Status")
            found[uuid] = (
                None
                if not state
                else {"state": state, "status": None if status is None else int(status.lower() != "success")}
            )
        elif uuid is not None:
            found.setdefault(uuid, None)
    return found


def parse_kernel_xids(text: str) -> list[dict[str, Any]]:
    """XID lines of a kernel log (``dmesg`` / ``journalctl -k``), oldest first."""
    xids = []
    for line in (text or "").splitlines():
        match = _XID.search(line)
        if match:
            xids.append(
                {"pci": match.group(1).lower(), "xid": int(match.group(2)), "text": (match.group(3) or "")[:200]}
            )
    return xids


def main(args: dict[str, Any]) -> dict[str, Any]:
    if args.get("list_fields"):  # the fields the gpu_health probe asks nvidia-smi for
        return {"fields": HEALTH_FIELDS, "old_names": OLD_NAMES, "remap_fields": REMAP_FIELDS}
    unparsed: dict[str, str] = {}
    return {
        "health": _parsed("--query-gpu", parse_health, args.get("health_csv", ""), unparsed),
        "remapped": _parsed("--query-remapped-rows", parse_remapped, args.get("remap_csv", ""), unparsed),
        "fabric": parse_fabric(args.get("query_text", "")),
        "kernel_xids": parse_kernel_xids(args.get("kernel_log", "")),
        "unparsed": unparsed,
    }


def _parsed(query: str, parse: Any, text: str, unparsed: dict[str, str]) -> dict[str, Any]:
    """One query's readings, or none (each then "not supported") when its output is not the
    CSV asked for - a driver that does not know a field may print its usage or banner
    instead: that costs this query's readings, never the GPU facts."""
    try:
        parsed: dict[str, Any] = parse(text)
    except ValueError as exc:
        unparsed[query] = str(exc)[:300]
        return {}
    return parsed

"""Pure parsers for ``nvidia-smi --query-* --format=csv,noheader,nounits`` output.

No host access here: ``main({"gpu_csv": ..., "apps_csv": ..., "banner": ...})`` turns the
recorded text into the same shape the NVML path of the ``gpus`` probe produces, so the
parsers are tested against recorded output with no GPU. Fields are the ones in
``GPU_FIELDS`` / ``APP_FIELDS``, in that order; values like ``[N/A]`` become None.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

GPU_FIELDS = ("index", "uuid", "name", "memory.total", "memory.used", "compute_cap", "driver_version")
APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")
_CUDA = re.compile(r"CUDA Version:\s*([0-9]+(?:\.[0-9]+)*)")


def _value(text: str) -> str | None:
    text = text.strip()
    if not text or (text.startswith("[") and text.endswith("]")):
        return None
    return text


def _int(text: str) -> int | None:
    value = _value(text)
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


def rows(text: str, width: int, free: int | None = None) -> list[list[str]]:
    """CSV rows of exactly ``width`` fields; the field at index ``free`` may hold commas."""
    out = []
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not row or not "".join(row).strip():
            continue
        if len(row) > width and free is not None:
            extra = len(row) - width
            row = [*row[:free], ", ".join(row[free : free + extra + 1]), *row[free + extra + 1 :]]
        if len(row) != width:
            raise ValueError(f"nvidia-smi row has {len(row)} fields, expected {width}: {row!r}")
        out.append(row)
    return out


def parse_gpus(text: str, fields: tuple[str, ...] = GPU_FIELDS) -> list[dict[str, Any]]:
    gpus: list[dict[str, Any]] = []
    for row in rows(text, len(fields), free=fields.index("name")):
        cells = dict(zip(fields, row, strict=True))
        gpus.append(
            {
                "index": _int(cells["index"]),
                "uuid": _value(cells["uuid"]),
                "name": _value(cells["name"]),
                "memory_total_mib": _int(cells["memory.total"]),
                "memory_used_mib": _int(cells["memory.used"]),
                "compute_capability": _value(cells.get("compute_cap", "")),
                "driver_version": _value(cells.get("driver_version", "")),
                "processes": [],
            }
        )
    return gpus


def parse_apps(text: str) -> list[dict[str, Any]]:
    apps = []
    for row in rows(text, len(APP_FIELDS), free=2):
        gpu_uuid, pid, name, used = row
        apps.append(
            {
                "gpu_uuid": _value(gpu_uuid),
                "pid": _int(pid),
                "name": _value(name),
                "used_mib": _int(used),
            }
        )
    return apps


def cuda_version(banner: str) -> str | None:
    match = _CUDA.search(banner or "")
    return match.group(1) if match else None


def combine(gpu_csv: str, apps_csv: str, banner: str = "", fields: tuple[str, ...] = GPU_FIELDS) -> dict[str, Any]:
    gpus = parse_gpus(gpu_csv, fields)
    by_uuid = {gpu["uuid"]: gpu for gpu in gpus}
    for app in parse_apps(apps_csv or ""):
        owner = by_uuid.get(app.pop("gpu_uuid"))
        if owner is not None:
            owner["processes"].append(app)
    driver = next((g["driver_version"] for g in gpus if g["driver_version"]), None)
    for gpu in gpus:
        del gpu["driver_version"]
    return {
        "backend": "nvidia-smi",
        "gpus": gpus,
        "driver_version": driver,
        "cuda_version": cuda_version(banner),
    }


def parse_pairs(text: str) -> dict[str, str | None]:
    """``--query-gpu=uuid,FIELD``: FIELD's value by GPU uuid (None where ``[N/A]``)."""
    return {str(_value(uuid)): _value(value) for uuid, value in rows(text, 2)}


def main(args: dict[str, Any]) -> dict[str, Any]:
    if "pairs_csv" in args:
        return {"values": parse_pairs(args["pairs_csv"])}
    fields = tuple(args.get("fields") or GPU_FIELDS)
    return combine(args.get("gpu_csv", ""), args.get("apps_csv", ""), args.get("banner", ""), fields)

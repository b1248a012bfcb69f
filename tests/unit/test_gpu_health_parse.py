"""The GPU health parsers on recorded nvidia-smi output and kernel log lines.

Real: the parsers (modules/gpu/probes/health_parse.py, pure functions). The input is
recorded in nvidia-smi's and the kernel's formats (tests/fakes/nvidia_smi/README.md says
which command each file answers); no GPU is involved.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from modules.gpu.probes import health_parse

RECORDED = Path(__file__).resolve().parents[1] / "fakes" / "nvidia_smi"
HEALTHY, SICK, BARE = (
    "GPU-3f9a1c2e-7b41-5d0e-a6c2-19e4b8f07d31",
    "GPU-8c20d6f4-0e1b-4a7d-93f5-6b2c1e9a4d58",
    "GPU-b17e5a93-2c6d-48f0-8e1a-d40c7f3b9265",
)


def recorded(name: str) -> str:
    return (RECORDED / name).read_text(encoding="utf-8")


def test_health_csv_readings_with_units_and_hex_mask() -> None:
    readings = health_parse.parse_health(recorded("query_health_3x.csv"))
    assert readings[HEALTHY] == {
        "ecc_uncorrected_volatile": 0,
        "ecc_uncorrected_aggregate": 0,
        "retired_pages_sbe": 0,
        "retired_pages_dbe": 0,
        "retired_pages_pending": False,
        "clocks_event_reasons": 0x1,
        "pcie_gen_current": 5,
        "pcie_gen_max": 5,
        "pcie_width_current": 16,
        "pcie_width_max": 16,
        "persistence_mode": True,
    }
    sick = readings[SICK]
    assert (sick["ecc_uncorrected_volatile"], sick["ecc_uncorrected_aggregate"]) == (2, 7)
    assert sick["clocks_event_reasons"] == 0x48
    assert (sick["pcie_width_current"], sick["pcie_width_max"]) == (4, 16)
    assert sick["persistence_mode"] is False


def test_not_available_is_none_never_zero() -> None:
    bare = health_parse.parse_health(recorded("query_health_3x.csv"))[BARE]
    assert set(bare.values()) == {None}
    assert health_parse.parse_remapped(recorded("query_remapped_rows_3x.csv"))[BARE] is None


def test_remapped_rows() -> None:
    rows = health_parse.parse_remapped(recorded("query_remapped_rows_3x.csv"))
    assert rows[HEALTHY] == {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False}
    assert rows[SICK] == {"corrected": 1, "uncorrected": 2, "pending": True, "failure": False}


def test_fabric_state_per_gpu_from_query_text() -> None:
    fabric = health_parse.parse_fabric(recorded("query_q_fabric.txt"))
    assert fabric[HEALTHY] == {"state": 3, "status": 0}
    assert fabric[SICK] == {"state": 1, "status": None}
    assert fabric[BARE] is None, "N/A: not an NVSwitch system"


def test_kernel_log_xids_keep_pci_and_text() -> None:
    xids = health_parse.parse_kernel_xids(recorded("kernel_log_xid.txt"))
    assert [(x["pci"], x["xid"]) for x in xids] == [("0000:19:00", 79), ("0000:1a:00", 13)]
    assert xids[0]["text"].endswith("GPU has fallen off the bus.")


def test_a_row_of_the_wrong_width_is_refused_not_misread() -> None:
    with pytest.raises(ValueError, match="expected 12"):
        health_parse.parse_health(f"{HEALTHY}, 0, 0\n")

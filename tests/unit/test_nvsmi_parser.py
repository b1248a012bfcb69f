"""The nvidia-smi CSV parser on recorded output (tests/fakes/nvidia_smi).

Real: the parser (modules/gpu/probes/nvsmi.py, a pure function). The input is recorded
`nvidia-smi --query-* --format=csv,noheader,nounits` output in the real format.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from modules.gpu.probes import nvsmi

RECORDED = Path(__file__).resolve().parents[1] / "fakes" / "nvidia_smi"
NO_CC_FIELDS = ("index", "uuid", "name", "memory.total", "memory.used", "driver_version")


def recorded(name: str) -> str:
    return (RECORDED / name).read_text(encoding="utf-8")


def test_eight_busy_blackwell_gpus_with_their_vllm_workers() -> None:
    facts = nvsmi.combine(
        recorded("query_gpu_8x_busy.csv"), recorded("query_compute_apps_vllm_tp8.csv"), recorded("banner.txt")
    )
    assert facts["backend"] == "nvidia-smi"
    assert facts["driver_version"] == "580.95.05"
    assert facts["cuda_version"] == "13.0"
    gpus = facts["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["compute_capability"] for g in gpus} == {"12.0"}
    assert {g["memory_total_mib"] for g in gpus} == {97887}
    assert gpus[0]["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert gpus[0]["memory_used_mib"] == 89762
    assert gpus[0]["processes"] == [
        {"pid": 52231, "name": "VLLM::Worker_TP0", "used_mib": 89247},
        {"pid": 52108, "name": "VLLM::EngineCore", "used_mib": 512},
    ]
    assert [p["name"] for p in gpus[7]["processes"]] == ["VLLM::Worker_TP7"]


def test_idle_gpus_have_no_processes() -> None:
    facts = nvsmi.combine(recorded("query_gpu_8x_idle.csv"), recorded("query_compute_apps_empty.csv"))
    assert all(g["processes"] == [] for g in facts["gpus"])
    assert max(g["memory_used_mib"] for g in facts["gpus"]) == 3
    assert facts["cuda_version"] is None  # no banner given


def test_not_available_values_become_none() -> None:
    facts = nvsmi.combine(
        recorded("query_gpu_old_driver_no_compute_cap.csv"),
        recorded("query_compute_apps_na_memory.csv"),
        fields=NO_CC_FIELDS,
    )
    gpu = facts["gpus"][0]
    assert gpu["compute_capability"] is None
    assert gpu["memory_used_mib"] is None
    assert gpu["processes"] == [{"pid": 1187, "name": "/usr/bin/python3", "used_mib": None}]
    assert facts["driver_version"] == "470.256.02"


def test_a_process_name_with_commas_is_kept_whole() -> None:
    gpu_csv = "0, GPU-a, NVIDIA H200, 143771, 900, 9.0, 570.1\n"
    apps = "GPU-a, 77, python3 train.py --tags a,b, 880\n"
    facts = nvsmi.combine(gpu_csv, apps)
    assert facts["gpus"][0]["processes"] == [{"pid": 77, "name": "python3 train.py --tags a, b", "used_mib": 880}]


def test_a_short_row_is_an_error_not_a_guess() -> None:
    with pytest.raises(ValueError, match="expected 7"):
        nvsmi.parse_gpus("0, GPU-a, NVIDIA H200\n")

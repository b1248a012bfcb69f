"""GPU facts (modules/gpu/probes/gpus.py): NVML first, nvidia-smi CSV next, else none.

Real: the probes, nvidia-ml-py (pynvml) loading a libnvidia-ml.so.1 through ctypes, the
probe program run by a separate python as it runs over SSH, `rigger facts`, processes.
Not real: the GPU driver (tests/fakes/fake_nvml) and the nvidia-smi binary (a script
replaying recorded output from tests/fakes/nvidia_smi).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import probes
from engine.connection.local import LocalConnection

pytestmark = pytest.mark.nvml_in_process  # conftest runs these last: see cli_in_process.py
REPO = Path(__file__).resolve().parents[2]
SMI_DIR = REPO / "tests" / "fakes" / "nvidia_smi"


import fakenvml  # tests/fakes/fake_nvml (pytest pythonpath)


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    fake = fakenvml.create(tmp_path_factory.mktemp("nvml"))
    yield fake
    os.environ.pop("FAKE_NVML_CONFIG", None)


@pytest.fixture
def holder() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["bash", "-c", "exec -a VLLM::Worker_TP3 sleep 300"])
    time.sleep(0.3)
    yield proc
    proc.kill()
    proc.wait()


def probe_in_child(name: str, env: dict[str, str]) -> dict[str, Any]:
    """Run the probe program with a fresh python, exactly as over SSH."""
    done = subprocess.run(
        [sys.executable, "-c", probes.program(name)],
        input="{}",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    return probes.parse_output(name, done.stdout, done.stderr)


def bare_env(**extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "FAKE_NVML_CONFIG")}
    keep["PATH"] = "/usr/bin:/bin"
    return {**keep, **extra}


def test_nvml_facts_in_process(fake: Any, holder: subprocess.Popen[bytes]) -> None:
    fake.eight_gpus([fakenvml.holder(holder.pid, 3, 88000)])
    fake.load_in_this_process()
    facts = LocalConnection().run_probe("gpu_facts", {})
    assert facts["gpu_backend"] == "nvml"
    assert facts["gpu_count"] == 8
    assert facts["gpu_driver_version"] == "580.95.05"
    assert facts["cuda_version"] == "13.0"
    gpu3 = facts["gpus"][3]
    assert gpu3["compute_capability"] == "12.0"
    assert gpu3["memory_total_mib"] == 97887
    assert gpu3["memory_used_mib"] == 88003
    assert gpu3["processes"] == [
        {"pid": holder.pid, "used_mib": 88000, "name": "sleep", "cmdline": "VLLM::Worker_TP3 300", "user": "root"}
    ]
    assert all(g["processes"] == [] for i, g in enumerate(facts["gpus"]) if i != 3)


def test_nvml_facts_from_a_separate_python(fake: Any, holder: subprocess.Popen[bytes]) -> None:
    fake.eight_gpus([fakenvml.holder(holder.pid, 0, 1000)])
    answer = probe_in_child("gpus", bare_env(**fake.env()))
    assert answer["backend"] == "nvml"
    assert answer["gpus"][0]["processes"][0]["pid"] == holder.pid
    holder.kill()
    holder.wait()
    answer = probe_in_child("gpus", bare_env(**fake.env()))
    assert answer["gpus"][0]["processes"] == [], "a dead process must free its GPU memory"
    assert answer["gpus"][0]["memory_used_mib"] == 3


def test_nvidia_smi_fallback_when_nvml_is_missing() -> None:
    env = bare_env(
        PATH=f"{SMI_DIR}:/usr/bin:/bin",
        FAKE_SMI_GPU="query_gpu_8x_busy.csv",
        FAKE_SMI_APPS="query_compute_apps_vllm_tp8.csv",
    )
    answer = probe_in_child("gpus", env)
    assert answer["backend"] == "nvidia-smi"
    assert answer["notes"] == ["nvml: NVML Shared Library Not Found"]
    assert answer["cuda_version"] == "13.0"
    assert len(answer["gpus"]) == 8
    worker = answer["gpus"][5]["processes"][0]
    assert worker["name"] == "VLLM::Worker_TP5"  # not a live pid here: name from nvidia-smi
    assert worker["cmdline"] is None


def test_nvidia_smi_without_compute_cap_field() -> None:
    env = bare_env(
        PATH=f"{SMI_DIR}:/usr/bin:/bin",
        FAKE_SMI_NO_COMPUTE_CAP="1",
        FAKE_SMI_GPU="query_gpu_old_driver_no_compute_cap.csv",
    )
    answer = probe_in_child("gpus", env)
    assert answer["backend"] == "nvidia-smi"
    assert answer["gpus"][0]["name"] == "Tesla V100-SXM2-32GB"
    assert answer["gpus"][0]["compute_capability"] is None


def test_no_driver_at_all_is_backend_none() -> None:
    answer = probe_in_child("gpu_facts", bare_env())
    assert (answer["gpu_backend"], answer["gpus"], answer["gpu_count"]) == ("none", [], 0)


def test_rigger_facts_shows_the_fake_gpus(fake: Any) -> None:
    fake.eight_gpus()
    done = subprocess.run(
        [sys.executable, "-m", "engine.cli", "facts"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **fake.env()},
    )
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)["localhost"]
    assert facts["gpu_backend"] == "nvml"
    assert [g["compute_capability"] for g in facts["gpus"]] == ["12.0"] * 8


def test_rigger_facts_shows_the_health_readings(fake: Any) -> None:
    gpus = [fakenvml.gpu(i) for i in range(2)]
    gpus[1] = fakenvml.gpu(1, ecc_uncorrected_volatile=3, pcie_width=[4, 16], unsupported=["retired_pages"])
    fake.write(gpus)
    done = subprocess.run(
        [sys.executable, "-m", "engine.cli", "facts"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **fake.env()},
    )
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)["localhost"]
    sick = facts["gpus"][1]
    assert sick["readings"]["ecc_uncorrected_volatile"] == 3
    assert (sick["readings"]["pcie_width_current"], sick["readings"]["pcie_width_max"]) == (4, 16)
    assert sick["readings"]["retired_pages_sbe"] is None and sick["unsupported"] == ["fabric", "retired_pages"]
    assert facts["gpus"][0]["readings"]["remapped_rows"] == {
        "corrected": 0, "uncorrected": 0, "pending": False, "failure": False,
    }  # fmt: skip
    assert "gpu_kernel_xids" in facts and facts["gpu_kernel_log"]

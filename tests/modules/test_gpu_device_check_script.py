"""scripts/gpu_device_check.py, the parts that run without a GPU.

Real: the script, run as a subprocess with this python; rigger's probes; nvidia-ml-py.
Not real: the GPU (tests/fakes/fake_nvml) where one is needed. The GPU part itself
(torch allocating, NVML on a real device) runs only on a machine with a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_device_check.py"


import fakenvml  # tests/fakes/fake_nvml (pytest pythonpath)


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "FAKE_NVML_CONFIG")}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd="/",
        env={**base, **(env or {})},
    )


def test_help_documents_how_to_run_it() -> None:
    done = run("--help")
    assert done.returncode == 0
    assert "--gib" in done.stdout and "--gpu" in done.stdout
    assert "pip install nvidia-ml-py" in SCRIPT.read_text()


def test_bad_arguments_are_refused() -> None:
    done = run("--gib", "0")
    assert done.returncode == 2
    assert "--gib must be > 0" in done.stderr


def test_without_a_gpu_it_says_it_cannot_run() -> None:
    done = run()
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot run: no NVIDIA GPU through NVML (backend none" in done.stdout


def test_unknown_gpu_index(tmp_path: Path) -> None:
    fake = fakenvml.create(tmp_path)
    fake.write([fakenvml.gpu(0)])
    done = run("--gpu", "5", env=fake.env())
    assert done.returncode == 2
    assert "[baseline]" not in done.stdout
    assert "cannot run: no GPU 5; there are 1" in done.stdout


def test_reads_the_baseline_then_needs_torch_with_cuda(tmp_path: Path) -> None:
    fake = fakenvml.create(tmp_path)
    fake.write([fakenvml.gpu(0)])
    done = run("--gib", "0.01", env=fake.env())
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        "[baseline] GPU 0 NVIDIA RTX PRO 6000 Blackwell Server Edition cc 12.0: 3 / 97887 MiB used; processes: none"
    ) in done.stdout
    if "cannot run: the torch child did not allocate" not in done.stdout:
        pytest.fail(f"expected the CUDA allocation to fail without a GPU:\n{done.stdout}")


def test_whole_flow_with_a_stand_in_gpu(tmp_path: Path) -> None:
    """The GPU side is faked twice over: NVML (fake_nvml) and torch's allocation (fake_torch)."""
    fake = fakenvml.create(tmp_path)
    fake.write([fakenvml.gpu(0, name="NVIDIA H200", total_mib=143771, cc=(9, 0))])
    stand_in = REPO / "tests" / "fakes" / "fake_nvml" / "fake_torch"
    done = run("--gib", "3", "--term-timeout-s", "2", env={**fake.env(), "PYTHONPATH": str(stand_in)})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "[baseline] GPU 0 NVIDIA H200 cc 9.0: 3 / 143771 MiB used; processes: none" in lines
    assert any(line.startswith("[child holds memory] GPU 0") and "3075 / 143771" in line for line in lines)
    assert any(line.startswith("[check mode] would terminate 1 process: pid ") for line in lines)
    assert "[after] GPU 0 NVIDIA H200 cc 9.0: 3 / 143771 MiB used; processes: none" in lines
    assert lines[-2] == "PASS"
    summary = json.loads(lines[-1])
    assert summary["checks"] == {
        "child_gone": True,
        "no_compute_process": True,
        "memory_back_to_baseline": True,
        "idempotent": True,
    }
    assert summary["killed_pids"] == [summary["child_pid"]]
    assert summary["mib_freed"] == 3072


def test_health_only_prints_nvml_beside_rigger_and_its_verdict(tmp_path: Path) -> None:
    fake = fakenvml.create(tmp_path)
    fake.write([fakenvml.gpu(0, ecc_uncorrected_volatile=2, pcie_width=[8, 16], unsupported=["retired_pages"])])
    done = run("--health-only", env=fake.env())
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    ecc = next(line for line in lines if line.startswith("[health] GPU 0 ecc_uncorrected_volatile:"))
    assert ecc.startswith("[health] GPU 0 ecc_uncorrected_volatile: NVML 2 | rigger 2 | refuse [ecc-volatile] 2 ")
    width = next(line for line in lines if line.startswith("[health] GPU 0 pcie_width_current:"))
    assert width == "[health] GPU 0 pcie_width_current: NVML 8 | rigger 8 | warn [pcie-width] PCIe link x8 of x16"
    sbe = next(line for line in lines if line.startswith("[health] GPU 0 retired_pages_sbe:"))
    assert sbe == "[health] GPU 0 retired_pages_sbe: NVML NVML: Not Supported | rigger None | ok"
    assert any(line.startswith("[health] host verdict: refuse: 1 GPU(s) (nvml)") for line in lines)
    assert json.loads(lines[-1])["health"]["verdict"] == "refuse"


def test_collective_only_reports_the_topology_and_skips_nccl_without_torch_cuda(tmp_path: Path) -> None:
    """No torch here: the NCCL smoke test says it is skipped and why; the topology fact is
    ensure_gpus_healthy's (fake NVML: two PCIe-only GPUs). The NCCL run itself is for a GPU."""
    fake = fakenvml.create(tmp_path)
    fake.write([fakenvml.gpu(0), fakenvml.gpu(1)])
    done = run("--collective-only", env=fake.env())
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "[topology] NVLink links up per GPU: {0: 0, 1: 0}; PCIe only: True" in lines, lines
    assert any(line.startswith("[collective] skipped: no torch with CUDA in ") for line in lines), lines
    summary = json.loads(lines[-1])
    assert summary["collective"]["outcome"] == "skipped" and summary["health"]["topology"]["pcie_only"] is True

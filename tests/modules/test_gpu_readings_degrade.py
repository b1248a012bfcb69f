"""One GPU reading that cannot be taken costs that reading, never the GPU facts; and the
topology (NVLink links up, P2P per pair) as NVML gives it (issue 32).

Real: the gpus / gpu_health / gpu_facts probes run by a separate python as over SSH,
nvidia-ml-py loading a libnvidia-ml.so.1 through ctypes, ensure_gpus_healthy and
check_serving_compat. Not real: the GPUs (tests/fakes/fake_nvml: "failing" makes one
call answer NVML_ERROR_UNKNOWN; "nvlink_links" / "p2p_status" are the topology NVML
reports) and the nvidia-smi binary (tests/fakes/nvidia_smi, replaying recorded output;
FAKE_SMI_BANNER_FOR makes a query print the banner, as the stand-in seen here did).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import probes
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.module_api import TaskContext, Unchanged
from modules.checkpoints import check_serving_compat
from modules.gpu import ensure_gpus_healthy as healthy

pytestmark = pytest.mark.nvml_in_process  # conftest runs these last: see cli_in_process.py
REPO = Path(__file__).resolve().parents[2]
SMI_DIR = REPO / "tests" / "fakes" / "nvidia_smi"
KIMI = REPO / "tests" / "fixtures" / "kimi-k2.5-nvfp4"

import fakenvml  # tests/fakes/fake_nvml (pytest pythonpath)
from gpudecoys import planning


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    fake = fakenvml.create(tmp_path_factory.mktemp("nvml"))
    fake.load_in_this_process()
    yield fake
    os.environ.pop("FAKE_NVML_CONFIG", None)


def probe_in_child(name: str, env: dict[str, str], args: str = "{}") -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", probes.program(name)], input=args, capture_output=True, text=True, timeout=60,
        check=False, env=env,
    )  # fmt: skip
    return probes.parse_output(name, done.stdout, done.stderr)


def smi_env(**extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "FAKE_NVML_CONFIG")}
    return {**keep, "PATH": f"{SMI_DIR}:/usr/bin:/bin", **extra}


def test_a_query_answered_with_the_banner_costs_that_field_not_the_gpus() -> None:
    answer = probe_in_child("gpus", smi_env(FAKE_SMI_BANNER_FOR="compute_cap"))
    assert answer["backend"] == "nvidia-smi" and len(answer["gpus"]) == 8
    first = answer["gpus"][0]
    assert first["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition" and first["memory_total_mib"] == 97887
    assert first["compute_capability"] is None and first["unsupported"] == ["compute_capability"]
    assert answer["driver_version"] == "580.95.05"
    assert any("compute_cap" in note and "unsupported" in note for note in answer["notes"])


def test_a_health_query_answered_with_the_banner_keeps_the_gpu_facts() -> None:
    """The case seen here: `rigger facts` reported no GPUs at all."""
    answer = probe_in_child("gpu_facts", smi_env(FAKE_SMI_BANNER_FOR="ecc.errors"))
    assert answer["gpu_count"] == 8 and answer["gpu_backend"] == "nvidia-smi"
    gpu = answer["gpus"][0]
    assert gpu["compute_capability"] == "12.0"
    assert gpu["readings"]["ecc_uncorrected_volatile"] is None and "ecc" in gpu["unsupported"]
    assert any("--query-gpu output could not be parsed" in note for note in answer["gpu_notes"])


def test_an_unparsable_process_list_is_still_an_error() -> None:
    """Without the holders no GPU may be judged idle: that one reading is required."""
    answer = probe_in_child("gpus", smi_env(FAKE_SMI_BANNER_FOR="compute-apps"))
    assert answer["backend"] == "error" and answer["gpus"] == []
    assert "could not be parsed" in answer["errors"][0]


def test_an_nvml_call_that_fails_costs_that_reading(fake: Any) -> None:
    fake.write([fakenvml.gpu(0), fakenvml.gpu(1, failing=["compute_capability", "nvlink"])])
    answer = probe_in_child("gpu_facts", {**os.environ, **fake.env()})
    assert answer["gpu_count"] == 2 and answer["gpu_backend"] == "nvml"
    good, bad = answer["gpus"]
    assert good["compute_capability"] == "12.0" and good["nvlink_links_up"] == 0
    assert bad["compute_capability"] is None and "compute_capability" in bad["unsupported"]
    assert bad["nvlink_links_up"] is None and "Unknown Error" in bad["read_errors"]["nvlink"]


def judge(**extra: Any) -> dict[str, Any]:
    args = {name: spec["default"] for name, spec in healthy.SCHEMA["properties"].items()}
    args.update(clock_reads=1, clock_interval_s=0, xid_wait_ms=0, kernel_log_path=os.devnull, fail_on="never", **extra)
    outcome = healthy.plan(planning(), args)
    assert isinstance(outcome, Unchanged)
    return {"msg": outcome.msg, **outcome.data}


def test_pcie_only_topology_with_p2p_as_nvml_gives_it(fake: Any) -> None:
    fake.write([fakenvml.gpu(i) for i in range(4)], p2p_status=1)  # NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
    data = judge()
    topo = data["topology"]
    assert topo["nvlink_links_up"] == {0: 0, 1: 0, 2: 0, 3: 0} and topo["pcie_only"] is True
    assert [p["gpus"] for p in topo["p2p"]][:3] == [[0, 1], [0, 2], [0, 3]] and len(topo["p2p"]) == 6
    assert {p["read"] for p in topo["p2p"]} == {"chipset not supported"}
    assert "PCIe only (no NVLink link up), P2P read: 6 pair(s) chipset not supported" in data["msg"]


def test_nvlink_topology(fake: Any) -> None:
    fake.write([fakenvml.gpu(i, nvlink_links=18, name="NVIDIA B200") for i in range(2)])
    topo = judge()["topology"]
    assert topo["nvlink_links_up"] == {0: 18, 1: 18} and topo["pcie_only"] is False
    assert topo["p2p"] == [{"gpus": [0, 1], "read": "ok"}]


def test_a_failing_p2p_call_is_unsupported_with_a_note(fake: Any) -> None:
    fake.write([fakenvml.gpu(0), fakenvml.gpu(1, failing=["p2p"])])
    (pair,) = judge()["topology"]["p2p"]
    assert pair["read"] == "unsupported" and "Unknown Error" in pair["note"]


def test_the_checker_acts_on_the_topology_the_facts_report(fake: Any) -> None:
    """gpu_facts (NVML) -> the checker's PCIe rules, with nothing hand-made in between."""
    fake.eight_gpus()
    facts = probe_in_child("gpu_facts", {**os.environ, **fake.env()})
    ctx = TaskContext(host_name="localhost", conn=ScopedConnection(LocalConnection()).planning(), facts=facts, vars={})
    args = {name: spec.get("default") for name, spec in check_serving_compat.SCHEMA["properties"].items()}
    args.update(model=str(KIMI), tensor_parallel_size=8, fail_on="never", vllm_version="0.32.0", triton_mla_fp8=True)
    args["all2all_backend"] = "deepep_low_latency"
    data = check_serving_compat.plan(ctx, args).data
    assert data["facts"]["gpu.pcie_only"] is True
    found = {f["id"]: f["severity"] for f in data["findings"]}
    assert found["all2all-needs-nvlink"] == "incompatible" and found["pcie-nccl-p2p-hang"] == "warning"

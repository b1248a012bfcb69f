"""ensure_gpus_healthy: one verdict per host from every health reading, through the module.

Real: the module and its rules, the gpu_health probe, nvidia-ml-py (pynvml) loading a
libnvidia-ml.so.1 through ctypes, LocalConnection in planning (check) mode, the probe in a
separate python as over SSH. Not real: the GPUs: tests/fakes/fake_nvml answers every
reading from its config (a GPU made sick per case), and the nvidia-smi binary (a script
replaying recorded output) for the fallback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import probes
from engine.module_api import TaskFailed, Unchanged
from modules.gpu import ensure_gpus_healthy as mod

pytestmark = pytest.mark.nvml_in_process  # conftest runs these last: see cli_in_process.py
REPO = Path(__file__).resolve().parents[2]
SMI_DIR = REPO / "tests" / "fakes" / "nvidia_smi"

import fakenvml  # tests/fakes/fake_nvml (pytest pythonpath)
from gpudecoys import planning

DEFAULTS = {name: spec["default"] for name, spec in mod.SCHEMA["properties"].items()}


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    fake = fakenvml.create(tmp_path_factory.mktemp("nvml"))
    fake.load_in_this_process()
    yield fake
    os.environ.pop("FAKE_NVML_CONFIG", None)


@pytest.fixture(scope="module")
def quiet_log(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An empty kernel log: the machine's own dmesg must not decide a case."""
    path = tmp_path_factory.mktemp("klog") / "kern.log"
    path.write_text("")
    return str(path)


def judge(quiet_log: str, **args: Any) -> tuple[str, dict[str, Any]]:
    """The verdict and data of the real module's plan (check mode), failing or not."""
    full = {**DEFAULTS, "clock_reads": 2, "clock_interval_s": 0, "xid_wait_ms": 0, "kernel_log_path": quiet_log, **args}
    try:
        outcome = mod.plan(planning(), full)
    except TaskFailed as failed:
        return failed.msg, dict(failed.data)
    assert isinstance(outcome, Unchanged)
    return outcome.msg, dict(outcome.data)


# (case, readings of GPU 1 of 2, verdict, rule that decides it)
READINGS = [
    ("healthy", {}, "serve", None),
    ("ecc volatile", {"ecc_uncorrected_volatile": 1}, "refuse", "ecc-volatile"),
    ("ecc aggregate only", {"ecc_uncorrected_aggregate": 3}, "warn", "ecc-aggregate"),
    ("ecc not supported", {"unsupported": ["ecc"]}, "serve", None),
    ("retired pending", {"retired_pages_pending": True}, "refuse", "retired-pages-pending"),
    ("a few retired pages", {"retired_pages_dbe": 2}, "warn", "retired-pages"),
    ("retired pages at the limit", {"retired_pages_sbe": 40, "retired_pages_dbe": 24}, "refuse", "retired-pages"),
    ("remap pending", {"remapped_rows": {"pending": True}}, "refuse", "remapped-rows-pending"),
    ("remap failed", {"remapped_rows": {"failure": True}}, "refuse", "remapped-rows-failure"),
    ("rows remapped", {"remapped_rows": {"uncorrected": 2}}, "warn", "remapped-rows"),
    ("idle clocks", {"clocks_event_reasons": 0x1}, "serve", None),
    ("power cap", {"clocks_event_reasons": 0x4}, "serve", None),
    ("hw slowdown", {"clocks_event_reasons": 0x8}, "warn", "clock-events"),
    ("power brake", {"clocks_event_reasons": 0x80}, "warn", "clock-events"),
    ("hw thermal", {"clocks_event_reasons": 0x41}, "refuse", "clock-events"),
    ("pcie x8 of x16", {"pcie_width": [8, 16]}, "warn", "pcie-width"),
    ("pcie x4 of x16", {"pcie_width": [4, 16]}, "refuse", "pcie-width"),
    ("pcie gen down at idle", {"pcie_gen": [1, 5]}, "serve", None),
    ("persistence off", {"persistence_mode": False}, "warn", "persistence-mode"),
    ("fabric completed", {"fabric": {"state": 3, "status": 0}}, "serve", None),
    ("fabric not started", {"fabric": {"state": 1, "status": 0}}, "refuse", "fabric"),
    ("fabric in progress", {"fabric": {"state": 2, "status": 0}}, "warn", "fabric"),
    ("fabric failed", {"fabric": {"state": 3, "status": 999}}, "refuse", "fabric"),
    ("xid 79", {"xids": [79]}, "refuse", "xid"),
    ("xid 13", {"xids": [13]}, "warn", "xid"),
    (
        "nothing supported",
        {"unsupported": ["ecc", "retired_pages", "remapped_rows", "clocks", "pcie", "persistence", "events"]},
        "serve",
        None,
    ),
]


@pytest.mark.parametrize(("case", "readings", "verdict", "rule"), READINGS, ids=[r[0] for r in READINGS])
def test_each_reading_healthy_warn_refuse(
    fake: Any, quiet_log: str, case: str, readings: dict[str, Any], verdict: str, rule: str | None
) -> None:
    fake.write([fakenvml.gpu(0), fakenvml.gpu(1, **readings)])
    msg, data = judge(quiet_log)
    assert data["verdict"] == verdict, msg
    assert msg.startswith(f"{verdict}: 2 GPU(s)")
    assert data["gpus"][0]["verdict"] == "serve"
    assert data["gpus"][1]["verdict"] == verdict
    if rule is None:
        assert data["findings"] == []
        return
    decisive = [f for f in data["findings"] if f["severity"] == verdict]
    assert [f["rule"] for f in decisive] == [rule]
    assert decisive[0]["gpu"] == 1 and decisive[0]["next_step"]
    assert f"[{rule}] GPU 1:" in msg
    assert rule in data["rules"]
    assert ("quarantine" in data) == (verdict == "refuse")


def test_next_step_says_what_the_operator_does(fake: Any, quiet_log: str) -> None:
    fake.write(
        [
            fakenvml.gpu(0, ecc_uncorrected_volatile=2),
            fakenvml.gpu(1, fabric={"state": 1, "status": 0}),
            fakenvml.gpu(2, remapped_rows={"failure": True}),
            fakenvml.gpu(3, xids=[79]),
        ]
    )
    _, data = judge(quiet_log)
    steps = {f["gpu"]: f["next_step"] for f in data["findings"]}
    assert steps[0].startswith("reset the GPU") and "nvidia-smi -r -i 0" in steps[0]
    assert "systemctl restart nvidia-fabricmanager" in steps[1]
    assert steps[2].startswith("drain the host and RMA")
    assert steps[3].startswith("reboot the host")


# (case, GPUs, arguments, rule)
LAYOUT = [
    ("no GPUs", 0, {}, "gpu-count"),
    ("too few for TP 8", 4, {"tensor_parallel_size": 8}, "gpu-count"),
    ("too few declared", 4, {"gpu_count": 8}, "gpu-count"),
    ("wrong model", 1, {"gpu_model": "H200"}, "gpu-model"),
    ("too little memory", 1, {"min_memory_mib": 143000}, "gpu-memory"),
    ("compute capability too old", 1, {"min_compute_capability": "12.1"}, "compute-capability"),
]


@pytest.mark.parametrize(("case", "count", "args", "rule"), LAYOUT, ids=[r[0] for r in LAYOUT])
def test_a_host_that_cannot_run_the_declared_layout_is_refused(
    fake: Any, quiet_log: str, case: str, count: int, args: dict[str, Any], rule: str
) -> None:
    fake.write([fakenvml.gpu(i) for i in range(count)])
    msg, data = judge(quiet_log, **args)
    assert data["verdict"] == "refuse", msg
    assert [f["rule"] for f in data["findings"]] == [rule] * len(data["findings"])
    assert f"[{rule}]" in msg
    # a configuration mistake, not a broken machine: refused, never quarantined
    assert "quarantine" not in data and data["configuration_mistake"] is True
    assert msg.endswith("(a configuration mistake): not quarantined")


def test_a_layout_mismatch_with_a_hardware_fault_quarantines_for_the_fault(fake: Any, quiet_log: str) -> None:
    fake.write([fakenvml.gpu(0, ecc_uncorrected_volatile=1)])
    msg, data = judge(quiet_log, min_memory_mib=143000)
    assert {f["rule"] for f in data["findings"]} == {"gpu-memory", "ecc-volatile"}
    assert data["quarantine"] == {"reason": "GPU health refused: ecc-volatile"}
    assert "configuration_mistake" not in data and "not quarantined" not in msg


def test_quarantine_false_never_marks_even_a_hardware_fault(fake: Any, quiet_log: str) -> None:
    fake.write([fakenvml.gpu(0, ecc_uncorrected_volatile=1)])
    _, data = judge(quiet_log, quarantine=False)
    assert data["verdict"] == "refuse" and "quarantine" not in data


def test_the_declared_layout_on_the_right_host_serves(fake: Any, quiet_log: str) -> None:
    fake.eight_gpus()
    msg, data = judge(
        quiet_log,
        gpu_count=8,
        tensor_parallel_size=8,
        gpu_model="RTX PRO 6000",
        min_memory_mib=97000,
        min_compute_capability="12.0",
    )
    assert msg == (
        "serve: 8 GPU(s) healthy (nvml; every rule passed); topology: PCIe only (no NVLink link up), "
        "P2P read: 28 pair(s) ok"
    )
    assert data["verdict"] == "serve"


def test_kernel_log_xid_since_boot_is_tied_to_its_gpu(fake: Any) -> None:
    fake.write([fakenvml.gpu(0, pci_bus=0x18), fakenvml.gpu(1, pci_bus=0x19)])
    _, data = judge(str(SMI_DIR / "kernel_log_xid.txt"))
    assert data["verdict"] == "refuse"
    by_xid = {f["evidence"].split()[1]: f for f in data["findings"]}
    assert by_xid["79"]["gpu"] == 1 and by_xid["79"]["severity"] == "refuse"
    assert "in the kernel log since boot (PCI 0000:19:00" in by_xid["79"]["evidence"]
    assert by_xid["13"]["gpu"] is None and by_xid["13"]["severity"] == "warn"  # no GPU at 1a here


def test_fail_on_never_registers_the_verdict(fake: Any, quiet_log: str) -> None:
    fake.write([fakenvml.gpu(0, ecc_uncorrected_volatile=5)])
    outcome = mod.plan(planning(), {**DEFAULTS, "fail_on": "never", "clock_reads": 1, "kernel_log_path": quiet_log})
    assert isinstance(outcome, Unchanged)
    assert outcome.data["verdict"] == "refuse"
    assert any("[ecc-volatile] GPU 0" in w for w in outcome.warnings)


def bare_env(**extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "FAKE_NVML_CONFIG")}
    keep["PATH"] = "/usr/bin:/bin"
    return {**keep, **extra}


def probe_in_child(env: dict[str, str], args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", probes.program("gpu_health")],
        input=args,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    return probes.parse_output("gpu_health", done.stdout, done.stderr)


def test_readings_from_a_separate_python_through_nvml(fake: Any, tmp_path: Path) -> None:
    fake.write([fakenvml.gpu(0, remapped_rows={"pending": True}, pcie_width=[8, 16])])
    log = tmp_path / "kern.log"
    log.write_text("")
    answer = probe_in_child(bare_env(**fake.env()), f'{{"kernel_log_path": "{log}", "clock_reads": 1}}')
    assert answer["backend"] == "nvml"
    readings = answer["gpus"][0]["readings"]
    assert readings["remapped_rows"]["pending"] is True
    assert readings["pcie_width_current"] == 8


def test_nvidia_smi_fallback_reads_the_same_readings(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    gpu_csv = tmp_path / "gpus.csv"
    gpu_csv.write_text("".join((SMI_DIR / "query_gpu_8x_idle.csv").read_text().splitlines(keepends=True)[:3]))
    env = bare_env(PATH=f"{SMI_DIR}:/usr/bin:/bin", FAKE_SMI_GPU=str(gpu_csv))
    answer = probe_in_child(env, f'{{"kernel_log_path": "{log}"}}')
    assert answer["backend"] == "nvidia-smi"
    sick = answer["gpus"][1]
    assert sick["readings"]["ecc_uncorrected_volatile"] == 2
    assert sick["readings"]["remapped_rows"]["pending"] is True
    assert sick["readings"]["fabric"] == {"state": 1, "status": None}
    assert answer["gpus"][2]["unsupported"] == ["ecc", "fabric", "remapped_rows"]
    from modules.gpu import health_rules

    found = health_rules.findings(answer, {**DEFAULTS, "clock_reads": 1})
    assert health_rules.verdict(found) == "refuse"
    assert {f.rule for f in found if f.gpu == 1} >= {"ecc-volatile", "remapped-rows-pending", "fabric", "pcie-width"}


def kimi_check(rigger: Any, fake: Any, tmp_path: Path) -> Any:
    """The Kimi playbook in check mode on this machine, its GPUs from ``fake``."""
    extra = json.dumps({"model_dir": str(tmp_path / "no-model-here"), "serve_port": 1})
    return rigger(
        "run", "playbooks/kimi_k25_nvfp4.yml", "-i", "inventory/local.yml", "--check", "-e", extra,
        "--output", "jsonl", cwd=REPO, env=fake.env(), timeout_s=240,
    )  # fmt: skip


HEALTH_TASK = "GPUs fit to serve (8 GPUs, memory, compute capability, XID/ECC/PCIe/fabric health)"


@pytest.mark.parametrize(
    ("gpus", "rule"),
    [
        ([], "gpu-count"),
        ([fakenvml.gpu(i) for i in range(4)], "gpu-count"),
        ([fakenvml.gpu(i, total_mib=81559, name="NVIDIA H100 80GB HBM3", cc=(9, 0)) for i in range(8)], "gpu-memory"),
        ([fakenvml.gpu(i, cc=(7, 5)) for i in range(8)], "compute-capability"),
        ([fakenvml.gpu(i, remapped_rows={"failure": i == 5}) for i in range(8)], "remapped-rows-failure"),
    ],
    ids=["no GPUs", "4 GPUs", "80 GiB GPUs", "SM 7.5", "one GPU out of spare rows"],
)
def test_kimi_refuses_an_unfit_host_before_any_download_or_kill(
    rigger: Any, tmp_path: Path, gpus: list[dict[str, Any]], rule: str
) -> None:
    fake = fakenvml.create(tmp_path / "nvml")
    fake.write(gpus)
    run = kimi_check(rigger, fake, tmp_path)
    assert run.rc != 0
    health = run.results(HEALTH_TASK)
    assert [r["status"] for r in health] == ["failed"], run.stdout[-3000:]
    assert health[0]["msg"].startswith("refuse: ") and f"[{rule}]" in health[0]["msg"]
    later = {r["task"] for r in run.results()} - {HEALTH_TASK}
    assert not any(t.startswith(("GPUs idle", "Kimi-K2.5-NVFP4 present", "The pinned vLLM")) for t in later), later


def test_kimi_passes_the_health_step_on_eight_fit_gpus(rigger: Any, tmp_path: Path) -> None:
    fake = fakenvml.create(tmp_path / "nvml")
    fake.eight_gpus()
    run = kimi_check(rigger, fake, tmp_path)
    health = run.results(HEALTH_TASK)
    assert [r["status"] for r in health] == ["ok"], run.stdout[-3000:]
    assert health[0]["msg"].startswith("serve: 8 GPU(s) healthy (nvml; every rule passed); topology: PCIe only")

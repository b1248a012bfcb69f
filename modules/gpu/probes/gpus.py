"""GPU facts: NVML through nvidia-ml-py when this python has it, else nvidia-smi CSV.

Answer: ``{"backend": "nvml" | "nvidia-smi" | "none", "gpus": [...], "driver_version",
"cuda_version", "notes": [why a backend was not used]}``. Each GPU: index, uuid, name,
memory_total_mib, memory_used_mib, compute_capability ("12.0"), processes [{pid,
used_mib, name, cmdline, user}]. A host without a driver answers backend "none" and no
GPUs; that is a fact, not an error. Args: ``backend`` ("auto" by default) forces one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("nvsmi", "procs")

import shutil
import subprocess

MIB = 1024 * 1024
SMI_TIMEOUT_S = 30


def _mib(value: int | None) -> int | None:
    return None if value is None else int(value) // MIB


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _cuda_version(code: int | None) -> str | None:
    if not code:
        return None
    return f"{code // 1000}.{(code % 1000) // 10}"


def _nvml_processes(nvml: Any, handle: Any) -> list[dict[str, Any]]:
    return [
        {"pid": int(p.pid), "used_mib": _mib(p.usedGpuMemory)}
        for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    ]


def _memory(nvml: Any, handle: Any) -> Any:
    """v2 counts driver-reserved memory apart from "used", so an idle GPU reads near 0."""
    version = getattr(nvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            return nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
        except (nvml.NVMLError, TypeError):
            pass
    return nvml.nvmlDeviceGetMemoryInfo(handle)


def _nvml_gpu(nvml: Any, index: int) -> dict[str, Any]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    memory = _memory(nvml, handle)
    try:
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        capability = f"{major}.{minor}"
    except nvml.NVMLError:
        capability = None
    return {
        "index": index,
        "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
        "name": _text(nvml.nvmlDeviceGetName(handle)),
        "memory_total_mib": _mib(memory.total),
        "memory_used_mib": _mib(memory.used),
        "compute_capability": capability,
        "processes": _nvml_processes(nvml, handle),
    }


def _via_nvml(notes: list[str]) -> dict[str, Any] | None:
    try:
        import pynvml as nvml
    except ImportError:
        notes.append("nvml: nvidia-ml-py (pynvml) is not installed for this python")
        return None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        notes.append(f"nvml: {exc}")
        return None
    try:
        try:
            cuda = _cuda_version(nvml.nvmlSystemGetCudaDriverVersion_v2())
        except nvml.NVMLError:
            cuda = None
        return {
            "backend": "nvml",
            "gpus": [_nvml_gpu(nvml, i) for i in range(nvml.nvmlDeviceGetCount())],
            "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_version": cuda,
        }
    finally:
        nvml.nvmlShutdown()


def _smi(argv: list[str]) -> tuple[int, str, str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False)
    return done.returncode, done.stdout, done.stderr.strip() or done.stdout.strip()


def _via_smi(notes: list[str]) -> dict[str, Any] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        notes.append("nvidia-smi: not found on PATH")
        return None
    fields = ["index", "uuid", "name", "memory.total", "memory.used", "compute_cap", "driver_version"]
    rc, gpu_csv, err = _smi([smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
    if rc != 0 and "compute_cap" in err:  # drivers before compute_cap existed
        fields.remove("compute_cap")
        rc, gpu_csv, err = _smi([smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
    if rc != 0:
        notes.append(f"nvidia-smi: exit {rc}: {err[:300]}")
        return None
    rc, apps_csv, err = _smi(
        [smi, "--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader,nounits"]
    )
    if rc != 0:
        notes.append(f"nvidia-smi --query-compute-apps: exit {rc}: {err[:300]}")
        apps_csv = ""
    banner = _smi([smi])[1]
    answer: dict[str, Any] = call(
        "nvsmi", {"gpu_csv": gpu_csv, "apps_csv": apps_csv, "banner": banner, "fields": fields}
    )
    return answer


def _describe_processes(answer: dict[str, Any]) -> None:
    pids = sorted({p["pid"] for g in answer["gpus"] for p in g["processes"] if p["pid"]})
    if not pids:
        return
    table = call("procs", {"pids": pids})
    known = {p["pid"]: p for p in table["processes"]}
    for gpu in answer["gpus"]:
        for proc in gpu["processes"]:
            seen = known.get(proc["pid"])
            proc["name"] = seen["name"] if seen else proc.get("name")
            proc["cmdline"] = seen["cmdline"] if seen else None
            proc["user"] = seen["user"] if seen else None


def main(args: dict[str, Any]) -> dict[str, Any]:
    wanted = args.get("backend", "auto")
    notes: list[str] = []
    answer = None
    if wanted in ("auto", "nvml"):
        answer = _via_nvml(notes)
    if answer is None and wanted in ("auto", "nvidia-smi"):
        answer = _via_smi(notes)
    if answer is None:
        answer = {"backend": "none", "gpus": [], "driver_version": None, "cuda_version": None}
    _describe_processes(answer)
    answer["notes"] = notes
    return answer

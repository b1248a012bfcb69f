"""GPU facts: NVML through nvidia-ml-py when this python has it, else nvidia-smi CSV.

Answer: ``{"backend": "nvml" | "nvidia-smi" | "none" | "error", "gpus": [...], "driver_version",
"cuda_version", "notes": [why a backend was not used], "errors": [...]}``. Each GPU:
index, uuid, name, memory_total_mib, memory_used_mib (None when the driver says
``[N/A]``), compute_capability ("12.0"), processes [{pid, used_mib, name, cmdline,
user}], and where a reading could not be taken, ``unsupported`` [its name] and
``read_errors`` {name: the driver's error}: one NVML call that fails, or one nvidia-smi
field a driver does not know, costs that reading, not the GPU facts. Only the process
list is required (without it no GPU can be judged idle). A host without a driver (no
NVML library, no nvidia-smi, driver not loaded) answers backend "none" and no GPUs; that
is a fact, not an error. Anything else that goes wrong (a driver/library version
mismatch, nvmlInit failing, nvidia-smi exiting non-zero) is quoted in ``errors``: the
GPUs exist but cannot be read, which callers must never take for "no GPUs" (backend
"error"). Args: ``backend`` ("auto" by default) forces one.
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
# NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIBRARY_NOT_FOUND: no driver here, not an error
NVML_NO_DRIVER = (9, 12)
SMI_NO_DRIVER = "couldn't communicate with the NVIDIA driver"
BASE_FIELDS = ["index", "uuid", "name", "memory.total", "memory.used"]
OPTIONAL_FIELDS = ("compute_cap", "driver_version")


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


def _device_node(nvml: Any, handle: Any) -> str | None:
    """/dev/nvidiaN of this GPU (N is the driver's minor number, not the index), or None
    when the driver does not say: a holder must have this node open (ensure_gpus_idle)."""
    try:
        return f"/dev/nvidia{int(nvml.nvmlDeviceGetMinorNumber(handle))}"
    except (nvml.NVMLError, TypeError, ValueError):
        return None


def _reading(nvml: Any, gpu: dict[str, Any], name: str, fn: Any) -> Any:
    """One NVML call of one GPU: one that fails costs that reading (None, listed in
    ``unsupported``, the driver's error in ``read_errors``), never the GPU or the probe."""
    try:
        return fn()
    except nvml.NVMLError as exc:
        gpu["unsupported"].append(name)
        gpu["read_errors"][name] = str(exc)
        return None


def _capability(nvml: Any, handle: Any) -> str:
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    return f"{major}.{minor}"


def _nvml_gpu(nvml: Any, index: int) -> dict[str, Any]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    gpu: dict[str, Any] = {"index": index, "unsupported": [], "read_errors": {}}
    memory = _reading(nvml, gpu, "memory", lambda: _memory(nvml, handle))
    uuid = _reading(nvml, gpu, "uuid", lambda: nvml.nvmlDeviceGetUUID(handle))
    name = _reading(nvml, gpu, "name", lambda: nvml.nvmlDeviceGetName(handle))
    gpu.update(
        device_node=_device_node(nvml, handle),
        uuid=None if uuid is None else _text(uuid),
        name=None if name is None else _text(name),
        memory_total_mib=None if memory is None else _mib(memory.total),
        memory_used_mib=None if memory is None else _mib(memory.used),
        compute_capability=_reading(nvml, gpu, "compute_capability", lambda: _capability(nvml, handle)),
        # no reading without it: a GPU whose holders cannot be listed is never judged idle
        processes=_nvml_processes(nvml, handle),
    )
    return gpu


def _via_nvml(notes: list[str], errors: list[str]) -> dict[str, Any] | None:
    try:
        import pynvml as nvml
    except ImportError:
        notes.append("nvml: nvidia-ml-py (pynvml) is not installed for this python")
        return None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        if getattr(exc, "value", None) in NVML_NO_DRIVER:
            notes.append(f"nvml: {exc}")
        else:
            errors.append(f"nvml: nvmlInit failed: {exc}")
        return None
    try:
        return _nvml_answer(nvml)
    except nvml.NVMLError as exc:
        errors.append(f"nvml: {exc}")
        return None
    finally:
        nvml.nvmlShutdown()


def _nvml_answer(nvml: Any) -> dict[str, Any]:
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


def _smi(argv: list[str]) -> tuple[int, str, str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False)
    return done.returncode, done.stdout, done.stderr.strip() or done.stdout.strip()


def _smi_failed(what: str, rc: int, err: str, notes: list[str], errors: list[str]) -> None:
    if SMI_NO_DRIVER in err:
        notes.append(f"{what}: exit {rc}: {err[:300]}")
    else:
        errors.append(f"{what}: exit {rc}: {err[:300]}")


def _via_smi(notes: list[str], errors: list[str]) -> dict[str, Any] | None:
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
        _smi_failed("nvidia-smi", rc, err, notes, errors)
        return None
    rc, apps_csv, err = _smi(
        [smi, "--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader,nounits"]
    )
    if rc != 0:  # without the process list no GPU can be judged idle
        errors.append(f"nvidia-smi --query-compute-apps: exit {rc}: {err[:300]}")
        return None
    banner = _smi([smi])[1]
    try:
        answer: dict[str, Any] = call(
            "nvsmi", {"gpu_csv": gpu_csv, "apps_csv": apps_csv, "banner": banner, "fields": fields}
        )
        return answer
    except ValueError as exc:
        why = str(exc)[:300]
    # Not the CSV asked for (a driver that does not know a field prints its usage or banner):
    # ask for the fields every driver has, then each optional one alone, so one unknown
    # field costs that reading ("unsupported", with a note), never the GPUs.
    rc, base_csv, err = _smi([smi, "--query-gpu=" + ",".join(BASE_FIELDS), "--format=csv,noheader,nounits"])
    try:
        answer = call("nvsmi", {"gpu_csv": base_csv, "apps_csv": apps_csv, "banner": banner, "fields": BASE_FIELDS})
    except ValueError as exc:  # the basic query or the process list: nothing to stand on
        errors.append(f"nvidia-smi: output could not be parsed: {why}; {str(exc)[:300]}")
        return None
    for field in OPTIONAL_FIELDS:
        _optional_field(smi, field, answer, notes)
    return answer


def _optional_field(smi: str, field: str, answer: dict[str, Any], notes: list[str]) -> None:
    rc, text, err = _smi([smi, f"--query-gpu=uuid,{field}", "--format=csv,noheader,nounits"])
    try:
        values = call("nvsmi", {"pairs_csv": text})["values"] if rc == 0 else None
    except ValueError as exc:
        err, values = str(exc), None
    if values is None:
        notes.append(f"nvidia-smi --query-gpu={field}: not readable ({err[:200]}); read as unsupported")
    key = {"compute_cap": "compute_capability"}.get(field, field)
    for gpu in answer["gpus"]:
        value = (values or {}).get(gpu["uuid"])
        if key == "driver_version":
            answer["driver_version"] = answer.get("driver_version") or value
            continue
        gpu[key] = value
        if values is None:
            gpu.setdefault("unsupported", []).append(key)


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
    errors: list[str] = []
    answer = None
    if wanted in ("auto", "nvml"):
        answer = _via_nvml(notes, errors)
    if answer is None and wanted in ("auto", "nvidia-smi"):
        answer = _via_smi(notes, errors)
    if answer is None:
        backend = "error" if errors else "none"
        answer = {"backend": backend, "gpus": [], "driver_version": None, "cuda_version": None}
    else:  # one backend answered: the other's failure is only a note
        notes.extend(errors)
        errors = []
    _describe_processes(answer)
    answer["notes"] = notes
    answer["errors"] = errors
    return answer

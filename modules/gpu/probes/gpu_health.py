"""GPU health readings: NVML through nvidia-ml-py when this python has it, else nvidia-smi.

Answer: the ``gpus`` probe's answer (backend, gpus, driver, notes, errors), each GPU with
``pci_bus_id``, ``readings`` {ecc_uncorrected_volatile, ecc_uncorrected_aggregate,
retired_pages_sbe, retired_pages_dbe, retired_pages_pending, remapped_rows {corrected,
uncorrected, pending, failure}, clocks_event_reasons (NVML's bit mask, the bits set in every
one of ``clock_reads`` reads), pcie_gen_current/max, pcie_width_current/max,
persistence_mode, fabric {state, status}, xids (critical XID events seen while listening)},
``unsupported`` (readings this GPU does not have: None there is "not supported", never 0),
``read_errors`` {reading: the driver's error} and ``nvlink_links_up`` (NVML's
nvmlDeviceGetNvLinkState over the links: 0 on a PCIe card, whose first link is Not
Supported; None when the call failed or nvidia-smi was read). Host level: ``p2p``
[{gpus: [i, j], read: "ok" | NVML's P2P status name | "unsupported", note}] from
nvmlDeviceGetP2PStatus (read capability) per pair. Host level: ``kernel_xids`` [{pci, xid,
text}] from the kernel log since boot (NVML delivers XID events only while a listener is
registered, so the log is the record of what happened before), ``kernel_log`` (where it
was read, or why not). Args: backend, clock_reads, clock_interval_s, xid_wait_ms,
kernel_log_path (a saved kernel log to read instead of ``dmesg`` / ``journalctl -k``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("gpus", "health_parse")

import os
import shutil
import stat
import subprocess
import time

INVALID_ARGUMENT = 2  # NVML_ERROR_INVALID_ARGUMENT: past the GPU's last NVLink
NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED
FUNCTION_NOT_FOUND = 13
TIMEOUT = 10  # NVML_ERROR_TIMEOUT: no event within the wait
XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
MAX_EVENTS = 256
SMI_TIMEOUT_S = 30
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS
P2P_CAPS_INDEX_READ = 0
# nvmlGpuP2PStatus_t, as NVML names them
P2P_STATUS = {
    0: "ok",
    1: "chipset not supported",
    2: "GPU not supported",
    3: "IOH topology not supported",
    4: "disabled by regkey",
    5: "not supported",
    6: "unknown",
}
KERNEL_LOG_MAX = 16 * 2**20


class _Gpu:
    """One GPU's readings while they are gathered."""

    def __init__(self) -> None:
        self.readings: dict[str, Any] = {"xids": []}
        self.unsupported: list[str] = []
        self.errors: dict[str, str] = {}


def _read(nvml: Any, gpu: _Gpu, name: str, fn: Any) -> Any:
    try:
        return fn()
    except nvml.NVMLError as exc:
        if getattr(exc, "value", None) == NOT_SUPPORTED:
            gpu.unsupported.append(name)
        else:
            gpu.errors[name] = str(exc)
        return None


def _fabric(nvml: Any, handle: Any) -> Any:
    """Fabric state through the versioned call where the binding and driver have it."""
    import ctypes

    versioned = getattr(nvml, "nvmlDeviceGetGpuFabricInfoV", None)
    if versioned is not None:
        info = nvml.c_nvmlGpuFabricInfoV_t()
        try:
            versioned(handle, ctypes.byref(info))
            return {"state": int(info.state), "status": int(info.status)}
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) != FUNCTION_NOT_FOUND:
                raise
    info = nvml.c_nvmlGpuFabricInfo_t()
    nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    return {"state": int(info.state), "status": int(info.status)}


def _remapped(nvml: Any, handle: Any) -> dict[str, Any]:
    corrected, uncorrected, pending, failure = nvml.nvmlDeviceGetRemappedRows(handle)
    return {"corrected": corrected, "uncorrected": uncorrected, "pending": bool(pending), "failure": bool(failure)}


def _nvml_gpu(nvml: Any, handle: Any) -> _Gpu:
    gpu = _Gpu()
    r = gpu.readings
    ecc = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    r["ecc_uncorrected_volatile"] = _read(
        nvml, gpu, "ecc", lambda: nvml.nvmlDeviceGetTotalEccErrors(handle, ecc, nvml.NVML_VOLATILE_ECC)
    )
    r["ecc_uncorrected_aggregate"] = (
        None
        if "ecc" in gpu.unsupported
        else _read(nvml, gpu, "ecc", lambda: nvml.nvmlDeviceGetTotalEccErrors(handle, ecc, nvml.NVML_AGGREGATE_ECC))
    )
    sbe = _read(nvml, gpu, "retired_pages", lambda: nvml.nvmlDeviceGetRetiredPages(handle, 0))
    r["retired_pages_sbe"] = None if sbe is None else len(sbe)
    dbe = None if sbe is None else _read(nvml, gpu, "retired_pages", lambda: nvml.nvmlDeviceGetRetiredPages(handle, 1))
    r["retired_pages_dbe"] = None if dbe is None else len(dbe)
    pending = (
        None
        if sbe is None
        else _read(nvml, gpu, "retired_pages", lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))
    )
    r["retired_pages_pending"] = None if pending is None else bool(pending)
    r["remapped_rows"] = _read(nvml, gpu, "remapped_rows", lambda: _remapped(nvml, handle))
    r["pcie_gen_current"] = _read(nvml, gpu, "pcie", lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle))
    r["pcie_gen_max"] = _read(nvml, gpu, "pcie", lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle))
    r["pcie_width_current"] = _read(nvml, gpu, "pcie", lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(handle))
    r["pcie_width_max"] = _read(nvml, gpu, "pcie", lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(handle))
    mode = _read(nvml, gpu, "persistence", lambda: nvml.nvmlDeviceGetPersistenceMode(handle))
    r["persistence_mode"] = None if mode is None else mode == 1
    r["fabric"] = _read(nvml, gpu, "fabric", lambda: _fabric(nvml, handle))
    gpu.unsupported = sorted(set(gpu.unsupported))
    return gpu


def _clock_reasons(nvml: Any, handles: list[Any], gpus: list[_Gpu], reads: int, interval_s: float) -> None:
    """A reason counts only when set in every read: a one-off power-brake blip is noise."""
    reader = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    reader = reader or nvml.nvmlDeviceGetCurrentClocksThrottleReasons  # bindings before R535
    masks: list[int | None] = [None] * len(handles)
    for attempt in range(max(1, reads)):
        if attempt:
            time.sleep(interval_s)
        for i, handle in enumerate(handles):
            value = _read(nvml, gpus[i], "clocks", lambda handle=handle: reader(handle))
            if value is not None:
                masks[i] = value if masks[i] is None else (masks[i] or 0) & value
    for gpu, mask in zip(gpus, masks, strict=True):
        gpu.readings["clocks_event_reasons"] = mask
        gpu.unsupported = sorted(set(gpu.unsupported))


def _xid_events(nvml: Any, handles: list[Any], gpus: list[_Gpu], wait_ms: int, notes: list[str]) -> None:
    """Critical XID events that arrive while a set is registered on every GPU."""
    try:
        events = nvml.nvmlEventSetCreate()
    except nvml.NVMLError as exc:
        notes.append(f"nvml: XID events not available: {exc}")
        return
    try:
        for i, handle in enumerate(handles):
            _read(
                nvml,
                gpus[i],
                "events",
                lambda handle=handle: nvml.nvmlDeviceRegisterEvents(handle, XID_CRITICAL, events),
            )
        index_of = {id(h): i for i, h in enumerate(handles)}
        for _ in range(MAX_EVENTS):
            try:
                data = nvml.nvmlEventSetWait_v2(events, wait_ms)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) != TIMEOUT:
                    notes.append(f"nvml: waiting for XID events: {exc}")
                break
            index = index_of.get(id(data.device), nvml.nvmlDeviceGetIndex(data.device))
            if 0 <= index < len(gpus) and data.eventType & XID_CRITICAL:
                gpus[index].readings["xids"].append(int(data.eventData))
    finally:
        nvml.nvmlEventSetFree(events)


def _via_nvml(answer: dict[str, Any], args: dict[str, Any]) -> None:
    import pynvml as nvml

    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        answer["errors"].append(f"nvml health readings: nvmlInit failed: {exc}")
        return
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(g["index"]) for g in answer["gpus"]]
        gpus = [_nvml_gpu(nvml, h) for h in handles]
        _clock_reasons(nvml, handles, gpus, int(args.get("clock_reads", 3)), float(args.get("clock_interval_s", 0.5)))
        _xid_events(nvml, handles, gpus, int(args.get("xid_wait_ms", 200)), answer["notes"])
        for info, handle, gpu in zip(answer["gpus"], handles, gpus, strict=True):
            pci = _read(nvml, gpu, "pci", lambda handle=handle: nvml.nvmlDeviceGetPciInfo(handle))
            info["pci_bus_id"] = None if pci is None else _text(pci.busId)
            info["nvlink_links_up"] = _nvlink_up(nvml, handle, gpu)
            _attach(info, gpu)
        answer["p2p"] = _p2p(nvml, handles, [g["index"] for g in answer["gpus"]])
    except nvml.NVMLError as exc:  # the driver answered the basics, then failed: say so
        answer["errors"].append(f"nvml health readings: {exc}")
    finally:
        nvml.nvmlShutdown()


def _nvlink_up(nvml: Any, handle: Any, gpu: _Gpu) -> int | None:
    """Links up: NVML answers Not Supported for a link a GPU does not have (every link of a
    PCIe card) and Invalid Argument past the last; any other error leaves it unknown."""
    up = 0
    for link in range(NVLINK_MAX_LINKS):
        try:
            up += bool(nvml.nvmlDeviceGetNvLinkState(handle, link))
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) in (NOT_SUPPORTED, INVALID_ARGUMENT):
                return up
            gpu.errors["nvlink"] = str(exc)
            return None
        except AttributeError:  # a binding without the call
            gpu.unsupported.append("nvlink")
            return None
    return up


def _p2p(nvml: Any, handles: list[Any], indexes: list[int]) -> list[dict[str, Any]]:
    """P2P read status per pair as NVML gives it; a call that fails is "unsupported" with
    the driver's error as the note, never a failed probe."""
    pairs = []
    for i in range(len(handles)):
        for j in range(i + 1, len(handles)):
            entry: dict[str, Any] = {"gpus": [indexes[i], indexes[j]]}
            try:
                code = int(nvml.nvmlDeviceGetP2PStatus(handles[i], handles[j], P2P_CAPS_INDEX_READ))
                entry["read"] = P2P_STATUS.get(code, f"status {code}")
            except (nvml.NVMLError, AttributeError) as exc:
                entry.update(read="unsupported", note=f"nvmlDeviceGetP2PStatus: {exc}")
            pairs.append(entry)
    return pairs


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _attach(info: dict[str, Any], gpu: _Gpu) -> None:
    info["readings"] = gpu.readings
    # the gpus probe may already have found readings it could not take (a failed call)
    info["unsupported"] = sorted({*gpu.unsupported, *(info.get("unsupported") or [])})
    info["read_errors"] = {**(info.get("read_errors") or {}), **gpu.errors}


# ---- nvidia-smi ------------------------------------------------------------------------


def _run(argv: list[str]) -> tuple[int, str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False)
    return done.returncode, done.stdout if done.returncode == 0 else (done.stderr or done.stdout).strip()[:300]


def _smi_health(smi: str, notes: list[str]) -> str:
    fields = [field for field, _ in call("health_parse", {"list_fields": True})["fields"]]
    rc, out = _run([smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
    if rc != 0:  # drivers before R535: "throttle reasons"
        old = call("health_parse", {"list_fields": True})["old_names"]
        rc, out = _run([smi, "--query-gpu=" + ",".join(old.get(f, f) for f in fields), "--format=csv,noheader,nounits"])
    if rc != 0:
        notes.append(f"nvidia-smi health query: exit {rc}: {out}")
        return ""
    return out


def _via_run(answer: dict[str, Any]) -> None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return
    notes = answer["notes"]
    health_csv = _smi_health(smi, notes)
    remap_fields = call("health_parse", {"list_fields": True})["remap_fields"]
    rc, remap_csv = _run([smi, "--query-remapped-rows=" + ",".join(remap_fields), "--format=csv,noheader"])
    if rc != 0:
        notes.append(f"nvidia-smi --query-remapped-rows: exit {rc}: {remap_csv}")
        remap_csv = ""
    rc, query_text = _run([smi, "-q"])
    if rc != 0:
        notes.append(f"nvidia-smi -q: exit {rc}: {query_text}")
        query_text = ""
    parsed = call("health_parse", {"health_csv": health_csv, "remap_csv": remap_csv, "query_text": query_text})
    readings = [name for _, name in call("health_parse", {"list_fields": True})["fields"] if name != "uuid"]
    for query, why in parsed.get("unparsed", {}).items():  # that reading is "not supported"
        notes.append(f"nvidia-smi {query} output could not be parsed, read as unsupported: {why}")
    for info in answer["gpus"]:
        gpu = _Gpu()
        gpu.readings.update(dict.fromkeys(readings, None))  # a reading not parsed is None
        gpu.readings.update(parsed["health"].get(info["uuid"], {}))
        gpu.readings["remapped_rows"] = parsed["remapped"].get(info["uuid"])
        gpu.readings["fabric"] = parsed["fabric"].get(info["uuid"])
        gpu.unsupported = sorted(name for name in ("ecc", "remapped_rows", "fabric") if _missing(gpu.readings, name))
        gpu.errors = {} if health_csv else {"health": "nvidia-smi could not be queried (see notes)"}
        info.setdefault("pci_bus_id", None)
        info["nvlink_links_up"] = None
        _attach(info, gpu)
    answer["p2p"] = []
    notes.append("nvidia-smi: XID events need NVML; only the kernel log is read for XIDs")
    notes.append("nvidia-smi: the NVLink / P2P topology needs NVML; not read")


def _missing(readings: dict[str, Any], name: str) -> bool:
    if name == "ecc":
        return readings.get("ecc_uncorrected_volatile") is None
    return readings.get(name) is None


# ---- the kernel log --------------------------------------------------------------------


def _kernel_log(path: str | None) -> tuple[str, str]:
    """(text, where it came from or why it could not be read)."""
    if path:
        try:
            # never a link, never blocking (a FIFO planted at the path), regular files only
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            return "", f"cannot read {path}: {exc.strerror or exc}"
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return "", f"cannot read {path}: not a regular file"
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - KERNEL_LOG_MAX))
            return handle.read().decode("utf-8", "replace"), path
    why = []
    for argv in (["dmesg"], ["journalctl", "-k", "-b", "--no-pager", "-o", "cat"]):
        if shutil.which(argv[0]) is None:
            why.append(f"{argv[0]}: not found")
            continue
        try:
            rc, out = _run(argv)
        except subprocess.TimeoutExpired:
            why.append(f"{argv[0]}: timed out")
            continue
        if rc == 0:
            return out[-KERNEL_LOG_MAX:], " ".join(argv)
        why.append(f"{argv[0]}: exit {rc}: {out[:120]}")
    return "", "kernel log unreadable (" + "; ".join(why) + ")"


def main(args: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = call("gpus", {"backend": args.get("backend", "auto")})
    if answer["backend"] == "nvml":
        _via_nvml(answer, args)
    elif answer["backend"] == "nvidia-smi":
        _via_run(answer)
    if answer["backend"] == "none" and not args.get("kernel_log_path"):
        # no NVIDIA driver here: no XID to find, and fact gathering on every host reads this
        answer["kernel_xids"], answer["kernel_log"] = [], "not read: no NVIDIA driver"
        return answer
    text, source = _kernel_log(args.get("kernel_log_path"))
    answer["kernel_xids"] = call("health_parse", {"kernel_log": text})["kernel_xids"]
    answer["kernel_log"] = source
    return answer

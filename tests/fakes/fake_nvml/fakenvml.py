"""Build and drive the fake ``libnvidia-ml.so.1`` (see fake_nvml.c).

Only the GPU is imaginary: the real nvidia-ml-py loads this library through ctypes, and
the processes it reports are real processes that really die when signalled.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("fake_nvml.c")
# Builds are named after this checkout (its resolved path, hashed) as well as the source:
# scripts/clean.sh removes this checkout's builds and leaves other checkouts' alone, which
# may be loaded by a test run there right now. clean.sh computes the same tag.
CHECKOUT_TAG = hashlib.sha256(str(Path(__file__).resolve().parents[3]).encode()).hexdigest()[:8]
BUILD_PREFIX = f"rigger-fake-nvml-{CHECKOUT_TAG}-"
LIB_NAME = "libnvidia-ml.so.1"
BLACKWELL = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
BLACKWELL_TOTAL_MIB = 97887


class FakeNvmlBuildError(RuntimeError):
    pass


def build(out_dir: Path) -> Path:
    """Compile the fake into ``out_dir/libnvidia-ml.so.1`` (gcc required)."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise FakeNvmlBuildError(
            "gcc not found: the fake NVML library is built from C by the tests "
            "(apt-get install gcc, or run scripts/ci/setup_gpu.sh)"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIB_NAME
    argv = [
        gcc,
        "-shared",
        "-fPIC",
        "-O1",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-pthread",
        f"-Wl,-soname,{LIB_NAME}",
        "-o",
        str(target),
        str(SOURCE),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise FakeNvmlBuildError(f"building the fake NVML failed:\n{done.stderr}")
    return target


def build_cached() -> Path:
    """Build once per source version into the temp directory; later calls reuse it."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    final = Path(tempfile.gettempdir()) / f"{BUILD_PREFIX}{digest}"
    if (final / LIB_NAME).is_file():
        return final / LIB_NAME
    staging = Path(tempfile.mkdtemp(prefix=f"{BUILD_PREFIX}build-"))
    build(staging)
    staging.chmod(0o755)
    try:
        staging.rename(final)
    except OSError:  # another test process won the race
        shutil.rmtree(staging, ignore_errors=True)
    return final / LIB_NAME


def gpu(
    index: int,
    *,
    name: str = BLACKWELL,
    total_mib: int = BLACKWELL_TOTAL_MIB,
    idle_used_mib: int = 3,
    cc: tuple[int, int] = (12, 0),
    **readings: Any,
) -> dict[str, Any]:
    """One imaginary GPU; ``readings`` are health readings as fake_nvml.c's header names
    them (``ecc_uncorrected_volatile=2``, ``pcie_width=[4, 16]``, ``xids=[79]``,
    ``fabric={"state": 3, "status": 0}``, ``unsupported=["ecc"]``); unset ones read healthy."""
    return {
        "uuid": f"GPU-{index:08x}-fake-4e1c-9a41-{index:012x}",
        "name": name,
        "memory_total_mib": total_mib,
        "idle_used_mib": idle_used_mib,
        "cc_major": cc[0],
        "cc_minor": cc[1],
        **readings,
    }


def holder(pid: int, gpu_index: int, used_mib: int, *, report_zombie: bool = False) -> dict[str, Any]:
    return {"pid": pid, "gpu": gpu_index, "used_mib": used_mib, "report_zombie": report_zombie}


@dataclass(frozen=True)
class FakeNvml:
    """A built library plus the JSON file that describes the imaginary GPUs."""

    lib_path: Path
    config_path: Path

    @property
    def lib_dir(self) -> Path:
        return self.lib_path.parent

    def write(
        self,
        gpus: Iterable[Mapping[str, Any]] = (),
        processes: Iterable[Mapping[str, Any]] = (),
        *,
        driver_version: str = "580.95.05",
        cuda_version: int = 13000,
        release_delay_s: float = 0.0,
        init_error: int = 0,
        p2p_status: int = 0,
    ) -> None:
        config = {
            "p2p_status": p2p_status,
            "driver_version": driver_version,
            "cuda_version": cuda_version,
            "release_delay_s": release_delay_s,
            "init_error": init_error,
            "gpus": list(gpus),
            "processes": list(processes),
        }
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(config, indent=1), encoding="utf-8")
        os.replace(tmp, self.config_path)
        deaths = Path(str(self.config_path) + ".deaths")
        if deaths.exists():
            deaths.unlink()

    def eight_gpus(self, processes: Iterable[Mapping[str, Any]] = (), **kwargs: Any) -> None:
        self.write([gpu(i) for i in range(8)], processes, **kwargs)

    def env(self) -> dict[str, str]:
        """Environment for a child process that should see the fake GPUs."""
        previous = os.environ.get("LD_LIBRARY_PATH", "")
        path = f"{self.lib_dir}:{previous}" if previous else str(self.lib_dir)
        return {"LD_LIBRARY_PATH": path, "FAKE_NVML_CONFIG": str(self.config_path)}

    def load_in_this_process(self) -> None:
        """Make this interpreter's pynvml find the fake.

        The library is loaded by absolute path; its SONAME is libnvidia-ml.so.1, so the
        dynamic loader hands pynvml's ``CDLL("libnvidia-ml.so.1")`` this same library.
        """
        os.environ["FAKE_NVML_CONFIG"] = str(self.config_path)
        ctypes.CDLL(str(self.lib_path), mode=ctypes.RTLD_GLOBAL)


def create(work_dir: Path) -> FakeNvml:
    """A fake whose GPUs are described in ``work_dir/fake_nvml.json`` (no GPUs yet)."""
    lib = build_cached()
    work_dir.mkdir(parents=True, exist_ok=True)
    fake = FakeNvml(lib_path=lib, config_path=work_dir / "fake_nvml.json")
    fake.write()
    return fake

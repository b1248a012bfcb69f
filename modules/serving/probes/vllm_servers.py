"""Read-only: the vLLM servers serve_vllm recorded in its default state directory (a host fact).

Args: ``state_dir`` (default ``~/.local/state/rigger/vllm``, serve_vllm's default; a server
started with another ``state_dir`` is not listed). Each ``NAME.json`` there is read as the
``vllm_state`` probe reads it (the guarded file read; the leader judged alive by pid, start
time and boot id, never by a name). Answer: ``vllm_servers`` [{name, state_path, running,
pid, port, served_model_name, spec_hash, log_path, log_facts}] (``log_facts``: what its
start logged about itself: attention and MoE backend, KV cache size, custom all-reduce
off, compile / autotune cache hits; modules/serving/loglines.py), or {name, state_path,
state_error} for a file that cannot be read. At most ``MAX_SERVERS``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("vllm_state", "fileio")

import os

DEFAULT_DIR = "~/.local/state/rigger/vllm"
MAX_SERVERS = 50
SHOWN = ("pid", "port", "served_model_name", "spec_hash", "log_path")


def _state_files(directory: str) -> list[str]:
    try:
        entries = call("fileio", {"op": "list", "path": directory})["entries"]
    except OSError:  # no directory (nothing started here), or one fileio refuses
        return []
    names = [str(e[0]) for e in entries if "/" not in str(e[0]) and e[1] == "file" and str(e[0]).endswith(".json")]
    return sorted(names)[:MAX_SERVERS]


def _server(state_path: str, name: str) -> dict[str, Any]:
    state = call("vllm_state", {"state_path": state_path, "health_url": ""})
    if state["state_error"] or state["record"] is None:
        return {"name": name, "state_path": state_path, "state_error": state["state_error"] or "no record"}
    record = state["record"]
    return {
        "name": record.get("name") or name,
        "state_path": state_path,
        "running": bool(state["leader_alive"]),
        **{key: record.get(key) for key in SHOWN},
        "log_facts": record.get("log_facts") or {},
    }


def main(args: dict[str, Any]) -> dict[str, Any]:
    directory = os.path.abspath(os.path.expanduser(str((args or {}).get("state_dir") or DEFAULT_DIR)))
    servers = [_server(os.path.join(directory, name), name[: -len(".json")]) for name in _state_files(directory)]
    return {"vllm_servers": servers}

"""engine_cache on real vLLM CPU: host A starts cold, its cache is captured and seeded to
host B, B starts warm; a host C with an empty cache starts cold after both (the control).

    python bench/cache_bench.py [--vllm-python .venv-vllm/bin/python] [--out DIR]

Real: vLLM 0.32 CPU (the tiny model of scripts/make_tiny_model.py), three starts of
the argv serve_vllm builds (modules/serving/spec.py) to /health 200; the engine_cache
module run by the real CLI (`python -m engine.cli run`, local connection) on an
inventory of two loopback hosts. Each "host" has its own cache directory, HOME and
TMPDIR (no torch, Triton or inductor cache is shared by another path), and the SAME
cache root path: each vLLM runs in a private mount namespace (unshare -m) with its
host's directory bind-mounted at the one root, as a fleet has one VLLM_CACHE_ROOT on
every host. C starts last, so whatever the machine kept warm (page cache, imports)
helps C at least as much as B: B faster than C is the cache's doing.
Prints one JSON object; with --out also keeps each start's log there.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from common import local_fleet, play_one_task

from modules.caches.cachekey import serve_args
from modules.serving.loglines import cache_proof
from modules.serving.spec import build_argv

READY_TIMEOUT_S = 600
# vllm/v1/engine/core.py: the engine's own count of its start-up, compile included
ENGINE_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")
PROOF_TEXT = ("AOT compil", "Compiling model again", "compiled graph", "Compiling a graph")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_for(python: Path, model: Path, root: Path, extra_env: dict[str, str]) -> dict[str, Any]:
    """serve_vllm's arguments, as a play would give them (the port is chosen per start)."""
    env = {"VLLM_CACHE_ROOT": str(root), "VLLM_CPU_KVCACHE_SPACE": "1", **extra_env}
    return {"model": str(model), "launcher": str(python), "dtype": "float32", "max_model_len": 256, "env": env}


def start(work: Path, host: str, serve: dict[str, Any], root: Path) -> dict[str, Any]:
    """One vLLM start with ``host``'s cache directory at ``root``; seconds to /health 200."""
    home = work / host
    for name in ("home", "tmp"):
        (home / name).mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = build_argv(serve_args({**serve, "port": port}))
    env = {**os.environ, **serve["env"], "HOME": str(home / "home"), "TMPDIR": str(home / "tmp")}
    bind = ["unshare", "-m", "--propagation", "private", "sh", "-c", 'mount --bind "$0" "$1" && shift && exec "$@"']
    log = home / "vllm.log"
    began = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen([*bind, str(home / "cache"), str(root), *argv], stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)  # fmt: skip
    try:
        ready = wait_ready(port, proc)
        seconds = time.perf_counter() - began
    finally:
        stop(proc)
    lines = log.read_text(errors="replace").splitlines()
    if not ready:
        raise SystemExit(f"{host}: vLLM did not answer /health:\n" + "\n".join(lines[-30:]))
    proof = cache_proof(lines)
    said = [line[:400] for line in lines if any(text in line for text in PROOF_TEXT)]
    init = [float(m.group(1)) for line in lines if (m := ENGINE_INIT.search(line))]
    engine_init_s = init[-1] if init else None
    return {"ready_s": round(seconds, 1), "engine_init_s": engine_init_s, "proof": str(proof), "lines": said}


def wait_ready(port: int, proc: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


def stop(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
            time.sleep(1)  # its EngineCore and workers leave with the session
            return
        except subprocess.TimeoutExpired:
            continue


def rigger(work: Path, name: str, task: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """One task by the real CLI on the two loopback hosts; its wall time and data."""
    run = play_one_task(work, name, local_fleet(("A", "B")), task)
    if run.rc != 0:
        raise SystemExit(f"{name}: rigger exited {run.rc}\n{run.output[-6000:]}")
    event = run.last_event()
    return round(run.wall_s, 2), ({**event["data"], "msg": event.get("msg")} if event else {})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--out", default=None, help="keep each start's log here")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE in the serve spec's env")
    opts = parser.parse_args()
    extra_env = dict(item.split("=", 1) for item in opts.env)
    python = Path(opts.vllm_python)
    with tempfile.TemporaryDirectory(prefix="cache-bench-") as tmp:
        work = Path(tmp)
        model = work / "tiny-llama"
        subprocess.run([str(python), str(REPO / "scripts" / "make_tiny_model.py"), str(model)], check=True,
                       capture_output=True)  # fmt: skip
        root = work / "vllm-cache"  # the one cache root path; each host's directory is bound there
        root.mkdir()
        for host in "ABC":
            (work / host / "cache").mkdir(parents=True)
        serve = serve_for(python, model, root, extra_env)
        common = {"cache_root": str(root), "serve": serve,
                  "host_cache_root": {h: str(work / h / "cache") for h in "AB"}}  # fmt: skip
        report: dict[str, Any] = {"env": extra_env, "A_cold": start(work, "A", serve, root)}
        capture = {
            "name": "capture",
            "engine_cache": {"state": "captured", **common},
            "when": "inventory_hostname == 'A'",
        }
        report["capture_s"], report["captured"] = rigger(work, "capture", capture)
        seed = {"name": "seed", "run_once": True, "engine_cache": {"state": "seeded", "source": "A", **common}}
        report["seed_s"], report["seeded"] = rigger(work, "seed", seed)
        report["B_warm"] = start(work, "B", serve, root)
        report["C_cold_control"] = start(work, "C", serve, root)
        report["cache_files"] = sum(1 for p in (work / "A" / "cache").rglob("*") if p.is_file())
        report["cache_bytes"] = sum(p.stat().st_size for p in (work / "A" / "cache").rglob("*") if p.is_file())
        if opts.out:
            out = Path(opts.out)
            out.mkdir(parents=True, exist_ok=True)
            for host in "ABC":
                shutil.copy(work / host / "vllm.log", out / f"{host}.log")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

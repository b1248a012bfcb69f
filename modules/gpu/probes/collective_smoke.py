"""A bounded collective smoke test: a 2-rank all-reduce with torch.distributed, killed at a deadline.

Run with the interpreter vLLM runs under (its venv's python), so the torch and NCCL it
tests are the server's. On PCIe-only GPUs NCCL has hung on the first all-reduce unless
``NCCL_P2P_DISABLE=1`` (local-inference-lab/rtx6kpro#15, #21): this finds it in seconds,
before a server start that would hang for its whole readiness timeout.

Args: ``ranks`` (2), ``timeout_s`` (the deadline for the whole test, torch's import
included), ``backend`` (``auto``: NCCL where torch sees CUDA, else gloo on the CPU;
``nccl``; ``gloo``), ``env`` (the serve environment, non-secret: NCCL_* and
CUDA_VISIBLE_DEVICES apply to the ranks as they will to vLLM's workers). Each rank is this
interpreter running ``RANK_PROGRAM`` in a session of its own, its arguments on stdin; they
meet through a file store in a fresh private directory (no port). At the deadline every
rank still running is killed (SIGKILL to the process group of a child this probe started
and has not reaped: its pid cannot have been reused) and the answer says ``hung``.

Answer: ``outcome`` (``passed``, ``hung``, ``failed``), ``backend``, ``elapsed_s``,
``timeout_s``, ``torch_version``, ``nccl_version``, ``visible_devices``, ``ranks``
[{rank, pid, rc, value, expected, device, error, killed_at_deadline}] (``error``: the rank's
last stderr line). ``failed`` when a rank exited on its own with an error (the others,
left waiting for it, are killed at the deadline) or summed wrong; ``hung`` when no rank
failed but some were still running at the deadline.
"""

from __future__ import annotations

from typing import Any

MUTATES = True  # starts processes on the GPUs and writes a rendezvous file

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

KILL_WAIT_S = 5.0
ERROR_CHARS = 400

# One rank: its arguments as JSON on stdin, its answer as one JSON line on stdout.
RANK_PROGRAM = r"""
import datetime, json, sys
args = json.loads(sys.stdin.read())
import torch
import torch.distributed as dist
backend = args["backend"]
if backend == "auto":
    backend = "nccl" if torch.cuda.is_available() else "gloo"
rank, world = args["rank"], args["ranks"]
device = "cpu"
if backend == "nccl":
    torch.cuda.set_device(rank)
    device = "cuda:%d" % rank
# said before the collective, so a rank killed in it still tells what it ran on
print(json.dumps({"rank": rank, "backend": backend, "device": device, "torch_version": torch.__version__}), flush=True)
dist.init_process_group(
    backend, init_method="file://" + args["store"], rank=rank, world_size=world,
    timeout=datetime.timedelta(seconds=max(1.0, args["timeout_s"])),
)
tensor = torch.full((1024,), float(rank + 1), device=device)
dist.all_reduce(tensor)
if backend == "nccl":
    torch.cuda.synchronize()
nccl = None
if backend == "nccl":
    version = torch.cuda.nccl.version()
    nccl = ".".join(str(part) for part in version) if isinstance(version, tuple) else str(version)
print(json.dumps({"value": float(tensor[0].item()), "expected": float(world * (world + 1) / 2),
                  "nccl_version": nccl}), flush=True)
dist.destroy_process_group()
"""


def _start(rank: int, args: dict[str, Any], store: str, workdir: str) -> tuple[subprocess.Popen[bytes], str, str]:
    out, err = os.path.join(workdir, f"rank{rank}.out"), os.path.join(workdir, f"rank{rank}.err")
    env = {**os.environ, **{str(k): str(v) for k, v in (args.get("env") or {}).items()}}
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", RANK_PROGRAM],
            stdin=subprocess.PIPE,
            stdout=stdout,
            stderr=stderr,
            env=env,
            start_new_session=True,
        )
    rank_args = {"rank": rank, "ranks": args["ranks"], "backend": args["backend"], "store": store}
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({**rank_args, "timeout_s": args["timeout_s"]}).encode())
    proc.stdin.close()
    return proc, out, err


def _wait(procs: list[subprocess.Popen[bytes]], deadline: float) -> list[int]:
    """Wait for every rank until the deadline; kill those still running then. Returns
    the indexes of the ranks killed (none: every rank exited on its own)."""
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            break
    killed = [index for index, proc in enumerate(procs) if proc.poll() is None]
    for index in killed:
        # our own child, not reaped yet: its pid (and process group) is still ours
        with contextlib.suppress(ProcessLookupError):
            os.killpg(procs[index].pid, signal.SIGKILL)
    for index in killed:
        with contextlib.suppress(subprocess.TimeoutExpired):
            procs[index].wait(timeout=KILL_WAIT_S)
    return killed


def _read(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _rank_answer(rank: int, proc: subprocess.Popen[bytes], out: str, err: str) -> dict[str, Any]:
    answer: dict[str, Any] = {"rank": rank, "pid": proc.pid, "rc": proc.returncode}
    for line in _read(out).splitlines():  # what it said before the collective, then its result
        try:
            said = json.loads(line)
        except ValueError:
            continue
        if isinstance(said, dict):
            answer.update(said)
    errors = [line.strip() for line in _read(err).splitlines() if line.strip()]
    answer["error"] = errors[-1][:ERROR_CHARS] if errors and proc.returncode != 0 else None
    return answer


def main(args: dict[str, Any]) -> dict[str, Any]:
    args = {"ranks": 2, "timeout_s": 60.0, "backend": "auto", "env": {}, **args}
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="rigger-collective-")
    try:
        store = os.path.join(workdir, "store")
        launched = [_start(rank, args, store, workdir) for rank in range(int(args["ranks"]))]
        killed = _wait([proc for proc, _, _ in launched], started + float(args["timeout_s"]))
        ranks = [_rank_answer(rank, *entry) for rank, entry in enumerate(launched)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for rank in ranks:
        rank["killed_at_deadline"] = rank["rank"] in killed
    passed = not killed and all(r["rc"] == 0 and r.get("value") == r.get("expected") for r in ranks)
    # a rank that failed on its own leaves the others waiting for it: a failure, not a hang
    failed_alone = any(r["rc"] != 0 and not r["killed_at_deadline"] for r in ranks)
    first = next((r for r in ranks if r.get("backend")), {})
    env = args.get("env") or {}
    return {
        "outcome": "passed" if passed else "hung" if killed and not failed_alone else "failed",
        "backend": first.get("backend") or args["backend"],
        "elapsed_s": round(time.monotonic() - started, 2),
        "timeout_s": float(args["timeout_s"]),
        "torch_version": first.get("torch_version"),
        "nccl_version": first.get("nccl_version"),
        "visible_devices": env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES")),
        "ranks": ranks,
    }

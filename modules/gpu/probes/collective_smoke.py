"""A bounded collective smoke test: a 2-rank all-reduce with torch.distributed, killed at a deadline.

Run with the interpreter vLLM runs under (its venv's python), so the torch and NCCL it
tests are the server's. On PCIe-only GPUs NCCL has hung on the first all-reduce unless
``NCCL_P2P_DISABLE=1`` (local-inference-lab/rtx6kpro#15, #21): this finds it in seconds,
before a server start that would hang for its whole readiness timeout.

Args: ``ranks`` (2), ``timeout_s`` (the deadline for the whole test, torch's import
included), ``backend`` (``auto``: NCCL where torch sees CUDA, else gloo on the CPU;
``nccl``; ``gloo``), ``env`` (the serve environment, non-secret: NCCL_* and
CUDA_VISIBLE_DEVICES apply to the ranks as they will to vLLM's workers). Each rank is this
interpreter running the fixed ``RANK_PROGRAM``, its arguments on stdin (never argv), its
output read through pipes (bounded); all start at once, so torch imports in parallel. They
meet at a TCP store rank 0 opens on 127.0.0.1 at a port the kernel picks (rank 0 says
which, the others are told on stdin; no file, no fixed port). At the deadline
every rank still running is ended through ``signal_procs`` (by pid and start time) and the
answer says ``hung``.

Answer: ``outcome`` (``passed``, ``hung``, ``failed``), ``backend``, ``elapsed_s``,
``timeout_s``, ``torch_version``, ``nccl_version``, ``visible_devices``, ``ranks``
[{rank, pid, rc, value, expected, device, error, killed_at_deadline}] (``error``: the
rank's last stderr line). ``failed`` when a rank exited on its own with an error (the
others, left waiting for it, are ended at the deadline) or summed wrong; ``hung`` when no
rank failed but some were still running at the deadline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

MUTATES = True  # starts processes on the GPUs (and ends them at the deadline)
USES = ("procs", "signal_procs")

import collections
import contextlib
import json
import os
import subprocess
import sys
import threading
import time

ERROR_CHARS = 400
KEPT_LINES = 200  # per stream: NCCL_DEBUG=INFO is chatty, only the end explains
TERM_WAIT_S = 1.0
KILL_WAIT_S = 5.0

# One rank: its arguments as one JSON line on stdin, what it says as JSON lines on stdout.
RANK_PROGRAM = r"""
import datetime, json, sys
args = json.loads(sys.stdin.readline())
import torch
import torch.distributed as dist
backend = args["backend"]
if backend == "auto":
    backend = "nccl" if torch.cuda.is_available() else "gloo"
rank, world = args["rank"], args["ranks"]
timeout = datetime.timedelta(seconds=max(1.0, args["timeout_s"]))
device = "cpu"
if backend == "nccl":
    torch.cuda.set_device(rank)
    device = "cuda:%d" % rank
if rank == 0:
    store = dist.TCPStore("127.0.0.1", 0, world, True, timeout=timeout, wait_for_workers=False)
else:  # imported in parallel with rank 0; the port it opened comes as a second line
    line = sys.stdin.readline()
    if not line:
        sys.exit("rank 0 opened no store (it failed first: see rank 0)")
    store = dist.TCPStore("127.0.0.1", json.loads(line)["port"], world, False, timeout=timeout)
# said before the collective, so a rank killed in it still tells what it ran on
print(json.dumps({"backend": backend, "device": device, "torch_version": torch.__version__,
                  "port": store.port}), flush=True)
dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
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


class _Rank:
    """One rank's process and what it said (its pipes drained by threads, bounded)."""

    def __init__(self, rank: int, args: dict[str, Any]) -> None:
        self.rank = rank
        self.said: dict[str, Any] = {}
        self.port_told = threading.Event()
        self.errors: collections.deque[str] = collections.deque(maxlen=KEPT_LINES)
        env = {**os.environ, **{str(k): str(v) for k, v in (args.get("env") or {}).items()}}
        # a fixed program under this interpreter; the arguments travel on stdin
        self.proc = subprocess.Popen(
            [sys.executable, "-c", RANK_PROGRAM],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        self.readers = [
            threading.Thread(target=self._read_out, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for reader in self.readers:
            reader.start()
        request = {k: args[k] for k in ("ranks", "backend", "timeout_s")}
        self.tell({**request, "rank": rank}, last=rank == 0)

    def tell(self, said: dict[str, Any] | None, last: bool = True) -> None:
        """A line on its stdin (None: nothing more); ``last`` closes it."""
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, ValueError):  # it died at once: its stderr says why
            if said is not None:
                self.proc.stdin.write((json.dumps(said) + "\n").encode())
                self.proc.stdin.flush()
            if last:
                self.proc.stdin.close()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                said = json.loads(raw.decode("utf-8", "replace"))
            except ValueError:
                continue
            if isinstance(said, dict):
                self.said.update(said)
                if "port" in said:
                    self.port_told.set()
        self.port_told.set()  # no more to say: nobody waits on it any longer

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").strip()
            if line:
                self.errors.append(line)

    def answer(self, killed: bool) -> dict[str, Any]:
        for reader in self.readers:
            reader.join(timeout=KILL_WAIT_S)
        said = {k: v for k, v in self.said.items() if k != "port"}
        rc = self.proc.returncode
        error = self.errors[-1][:ERROR_CHARS] if self.errors and rc not in (0, None) and not killed else None
        return {"rank": self.rank, "pid": self.proc.pid, "rc": rc, **said, "error": error, "killed_at_deadline": killed}


def _remaining(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _end(ranks: list[_Rank]) -> None:
    """End the ranks still running, by identity, through signal_procs."""
    pids = [r.proc.pid for r in ranks]
    found = call("procs", {"pids": pids})["processes"]
    targets = [{"pid": p["pid"], "start_time": p["start_time"]} for p in found]
    if targets:
        call("signal_procs", {"targets": targets, "term_timeout_s": TERM_WAIT_S, "kill_timeout_s": KILL_WAIT_S})
    for rank in ranks:
        with contextlib.suppress(subprocess.TimeoutExpired):
            rank.proc.wait(timeout=KILL_WAIT_S)


def _run(args: dict[str, Any], deadline: float) -> tuple[list[_Rank], list[int]]:
    """Start every rank (torch imports in parallel), tell the others the port rank 0
    opened, wait until the deadline. Returns the ranks and those ended at the deadline."""
    ranks = [_Rank(index, args) for index in range(int(args["ranks"]))]
    ranks[0].port_told.wait(_remaining(deadline))
    port = ranks[0].said.get("port")
    for rank in ranks[1:]:
        rank.tell(None if port is None else {"port": int(port)})
    for rank in ranks:
        try:
            rank.proc.wait(timeout=_remaining(deadline))
        except subprocess.TimeoutExpired:
            break
    running = [rank for rank in ranks if rank.proc.poll() is None]
    if running:
        _end(running)
    return ranks, [rank.rank for rank in running]


def main(args: dict[str, Any]) -> dict[str, Any]:
    args = {"ranks": 2, "timeout_s": 60.0, "backend": "auto", "env": {}, **args}
    started = time.monotonic()
    launched, killed = _run(args, started + float(args["timeout_s"]))
    ranks = [rank.answer(rank.rank in killed) for rank in launched]
    passed = not killed and len(ranks) == int(args["ranks"])
    passed = passed and all(r["rc"] == 0 and r.get("value") == r.get("expected") for r in ranks)
    # a rank that failed on its own leaves the others waiting for it: a failure, not a hang
    failed_alone = any(r["rc"] not in (0, None) and not r["killed_at_deadline"] for r in ranks)
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

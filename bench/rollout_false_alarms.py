"""How often the rollout's performance gate fails a server that did not change.

    .venv/bin/python bench/rollout_false_alarms.py [--rounds 20] [--restart-rounds 3]

Starts one tiny vLLM CPU server (scripts/make_tiny_model.py, serve_vllm on the local
connection), then, per round, measures it `repeats` times as the gate's "before" and
`repeats` times as its "after" with nothing changed in between, and judges the two with the
gate's own rule (modules/rollout/gates.py, default thresholds; a result below the band is
measured again `--confirmations` times, as the gate does). `--restart-rounds` rounds
restart the same spec between before and after (throughput can differ between two starts of
one server). Prints each round's tokens/s medians and verdict, then the false-alarm rate.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.connection.base import ScopedConnection, TaskScope
from engine.connection.local import LocalConnection
from engine.module_api import TaskContext, Unchanged
from modules.rollout import gates, rollout
from modules.serving import serve_vllm

VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"


def _context(planning: bool) -> TaskContext:
    conn = ScopedConnection(LocalConnection(), TaskScope()).planning(planning)
    return TaskContext(host_name="localhost", conn=conn, facts={}, vars={}, progress=lambda _: None)


def _serve(args: dict[str, Any]) -> None:
    planned = serve_vllm.plan(_context(True), args)
    if not isinstance(planned, Unchanged):
        serve_vllm.apply(_context(False), args, planned)


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--restart-rounds", type=int, default=3)
    parser.add_argument("--confirmations", type=int, default=1, help="as the gate's `confirmations`")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rigger-false-alarms-"))
    model = work / "tiny"
    subprocess.run([str(VLLM_PYTHON), str(REPO / "scripts" / "make_tiny_model.py"), str(model)], check=True,
                   capture_output=True)  # fmt: skip
    defaults = {k: v["default"] for k, v in serve_vllm.SCHEMA["properties"].items() if "default" in v}
    args = {**defaults, "name": "false-alarms", "model": str(model), "served_model_name": "tiny",
            "launcher": str(VLLM_PYTHON), "port": _port(), "dtype": "float32", "max_model_len": 256,
            "gpu_memory_utilization": 0.12, "extra_args": ["--enforce-eager"],
            "state_dir": str(work / "state")}  # fmt: skip
    config = dict(rollout.PERFORMANCE_DEFAULTS)
    endpoint = gates.Endpoint(int(args["port"]), "tiny", None)
    alarms, total = 0, 0
    try:
        _serve(args)
        for index in range(options.rounds + options.restart_rounds):
            restart = index >= options.rounds
            before = gates.measure(_context(False), endpoint, config)
            if restart:
                _serve({**args, "state": "restarted"})
            after = gates.measure(_context(False), endpoint, config)
            verdict = gates.performance(before, after, config)
            for _ in range(options.confirmations):
                if verdict.passed:
                    break
                after = gates.measure(_context(False), endpoint, config)
                verdict = gates.performance(before, after, config)
            total += 1
            alarms += 0 if verdict.passed else 1
            medians = [statistics.median(s.tokens_per_s for s in side) for side in (before, after)]
            outcome = "pass" if verdict.passed else "FALSE ALARM: " + verdict.summary
            label = " (restarted)" if restart else ""
            print(f"round {index + 1}{label}: tokens/s {medians[0]:.1f} -> {medians[1]:.1f}: {outcome}", flush=True)
    finally:
        stop = {**args, "state": "stopped"}
        planned = serve_vllm.plan(_context(True), stop)
        if not isinstance(planned, Unchanged):
            serve_vllm.apply(_context(False), stop, planned)
    print(f"false alarms: {alarms} of {total} rounds ({alarms * 100.0 / total:.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

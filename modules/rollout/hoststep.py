"""One host's turn in a rollout: out of routing, measured (its config files' bytes kept),
its checkpoint patched, changed, gated, and either put back on the new spec or rolled back
(the kept files written back, the recorded previous server launched again) and put back."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.module_api import Change, ScopedConnection, TaskContext, TaskFailed, Unchanged
from modules.rollout import checkpoint, gates
from modules.rollout.fleet import FleetHost
from modules.routing import haproxy
from modules.routing.endpoints_file import EndpointsFile
from modules.serving import restore, serve_vllm
from modules.serving import session as sessions
from modules.serving.baseline import baseline_key, record
from modules.serving.bench import BenchSummary
from modules.serving.check_serving import api_key

READMIT_TIMEOUT_S = 120.0


@dataclass
class HostTurn:
    """What happened on one host, in order: the rollout record's entry for it."""

    host: str
    rollout_id: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    gates: list[dict[str, Any]] = field(default_factory=list)
    rolled_back: dict[str, Any] | None = None
    outcome: str = "pending"

    def step(self, name: str, **evidence: Any) -> None:
        self.steps.append({"step": name, "at": round(time.time(), 3), **evidence})

    def as_data(self) -> dict[str, Any]:
        return {"host": self.host, "outcome": self.outcome, "steps": self.steps, "gates": self.gates,
                "rolled_back": self.rolled_back}  # fmt: skip


@dataclass(frozen=True)
class Router:
    conn: ScopedConnection
    backend: haproxy.Backend
    drain_timeout_s: float
    endpoints: EndpointsFile | None = None

    def take_out(self, host: FleetHost, turn: HostTurn, progress: Callable[[str], None]) -> None:
        found = haproxy.servers(self.conn, self.backend)
        haproxy.refuse_last_serving(found, [host.lb_server], self.backend)
        if self.endpoints:  # first: a router watching the file stops sending work as HAProxy does
            turn.step("left the endpoints file", **self.endpoints.without(self.conn, host.name))
        haproxy.set_state(self.conn, self.backend, host.lb_server, "drain")
        drained = haproxy.wait_drained(self.conn, self.backend, host.lb_server, self.drain_timeout_s, progress)
        turn.step("drained", **drained)

    def put_back(self, host: FleetHost, turn: HostTurn) -> None:
        haproxy.set_state(self.conn, self.backend, host.lb_server, "ready")
        deadline = time.monotonic() + READMIT_TIMEOUT_S
        while not (now := haproxy.servers(self.conn, self.backend)[host.lb_server]).serving:
            if time.monotonic() > deadline:
                raise TaskFailed(
                    f"HAProxy {self.backend.name}/{host.lb_server} not UP after re-admission: {now.status}"
                )
            time.sleep(haproxy.POLL_S)
        turn.step("readmitted", status=now.status)
        if self.endpoints:  # last: only a server HAProxy sees UP is listed again
            turn.step("back in the endpoints file", **self.endpoints.with_(self.conn, host.name))


@dataclass(frozen=True)
class Before:
    record: Mapping[str, Any]
    golden: list[str]
    samples: list[Any]
    kept: checkpoint.Kept = field(default_factory=checkpoint.Kept)


@dataclass(frozen=True)
class Planned:
    """What a host would change: the checkpoint patch (None: the release patches nothing
    there) and serve_vllm's plan against the config files as the patch would leave them."""

    patch: Change | Unchanged | None
    serve: Change | Unchanged

    def changes(self) -> list[Change]:
        return [c for c in (self.patch, self.serve) if isinstance(c, Change)]

    def fingerprint(self) -> dict[str, str]:
        # the patch's entries last: a file's digest is the one planned from, not the predicted one
        return {k: v for c in (self.serve, self.patch) if isinstance(c, Change) for k, v in c.fingerprint.items()}


def plan_host(ctx: TaskContext, host: FleetHost) -> Planned:
    patch = checkpoint.plan_patch(ctx, host)
    serve = serve_vllm.plan(checkpoint.as_patched(host.context(ctx, planning=True), patch), host.server_args)
    return Planned(patch, serve)


def plan_change(ctx: TaskContext, host: FleetHost) -> Change | Unchanged:
    return serve_vllm.plan(host.context(ctx, planning=True), host.server_args)


def previous_record(ctx: TaskContext, host: FleetHost) -> Mapping[str, Any]:
    hctx = host.context(ctx, planning=True)
    status = sessions.read_status(hctx.conn, serve_vllm.state_path(host.server_args), host_url(host) + "/health")
    if status.record is None or not status.healthy:
        raise TaskFailed(
            f"rollout: {host.name}'s server is not healthy now ({status.describe()}): there would be "
            "nothing to roll back to; fix it (serve_vllm) or leave the host out of `hosts`"
        )
    return status.record


def host_url(host: FleetHost) -> str:
    return serve_vllm.base_url(host.server_args)


def endpoint(host: FleetHost) -> gates.Endpoint:
    return gates.Endpoint(host.port, host.served_name, host.server_args["api_key_env"])


def measure_before(ctx: TaskContext, host: FleetHost, config: Mapping[str, Any], turn: HostTurn) -> Before:
    hctx = host.context(ctx, planning=False)
    rec = previous_record(ctx, host)
    golden_cfg = config.get("golden")
    answers = (
        gates.ask_golden(hctx, endpoint(host), golden_cfg["prompts"], golden_cfg["max_tokens"]) if golden_cfg else []
    )
    perf_cfg = config.get("performance")
    samples = _warm_then_measure(hctx, host, perf_cfg, turn) if perf_cfg else []
    key = baseline_key(hctx, host.served_name, rec)
    for sample in samples:
        record(key, sample.as_data(), "rollout: before the change", turn.rollout_id)
    turn.step("measured before", spec_hash=rec.get("spec_hash"), golden_answers=len(answers),
              **_figures(samples))  # fmt: skip
    return Before(rec, answers, samples, keep_files(hctx, host, rec, turn))


def _warm_then_measure(
    hctx: TaskContext, host: FleetHost, config: Mapping[str, Any], turn: HostTurn
) -> list[BenchSummary]:
    """The warm-up load tests (their figures in the journal, not judged), then the samples."""
    warm = gates.warm_up(hctx, endpoint(host), config)
    if warm:
        turn.step("warmed up", **_figures(warm))
    return gates.measure(hctx, endpoint(host), config)


def _figures(samples: list[BenchSummary]) -> dict[str, list[Any]]:
    return {f: [s.as_data()[f] for s in samples] for f in ("tokens_per_s", "ttft_p50_s", "ttft_p95_s")}


def keep_files(hctx: TaskContext, host: FleetHost, rec: Mapping[str, Any], turn: HostTurn) -> checkpoint.Kept:
    kept = checkpoint.keep(hctx, rec, host.checkpoint_patch)
    turn.step("kept config files", files=kept.paths())
    if kept.drifted:
        turn.step("config files drifted", files=list(kept.drifted),
                  message="changed since the previous server was launched (it read other bytes); a rollback "
                  "puts back the bytes from before this change, not the recorded ones")  # fmt: skip
    return kept


def patch_checkpoint(ctx: TaskContext, host: FleetHost, turn: HostTurn) -> None:
    """The release's checkpoint patch, before serve_vllm starts the new spec on its files."""
    evidence = checkpoint.apply_patch(ctx, host)
    if evidence is not None:
        turn.step("checkpoint patched", **evidence)


def apply_change(ctx: TaskContext, host: FleetHost, turn: HostTurn) -> gates.GateResult:
    """serve_vllm's own plan and apply on the host: its staged start is the readiness gate."""
    planned = plan_change(ctx, host)
    if isinstance(planned, Unchanged):
        return gates.readiness(None, None)
    try:
        result = serve_vllm.apply(host.context(ctx, planning=False), host.server_args, planned)
    except TaskFailed as exc:
        turn.step("changed", ok=False)
        return gates.readiness(None, exc)
    turn.step("changed", ok=True, pid=result.data.get("pid"), spec_hash=result.data.get("spec_hash"))
    return gates.readiness(result.data, None)


def run_gates(
    ctx: TaskContext, host: FleetHost, config: Mapping[str, Any], before: Before, turn: HostTurn
) -> list[gates.GateResult]:
    hctx = host.context(ctx, planning=False)
    results = []
    golden_cfg = config.get("golden")
    if golden_cfg:
        after = gates.ask_golden(hctx, endpoint(host), golden_cfg["prompts"], golden_cfg["max_tokens"])
        results.append(gates.golden(golden_cfg["prompts"], before.golden, after))
        if not results[-1].passed:
            return results
    structured_cfg = config.get("structured")
    if structured_cfg:
        results.append(gates.structured(structured_cfg, gates.ask_structured(hctx, endpoint(host), structured_cfg)))
        if not results[-1].passed:
            return results
    perf_cfg = config.get("performance")
    if perf_cfg:
        results.append(_performance(hctx, host, perf_cfg, before, turn))
    return results


def _performance(
    hctx: TaskContext, host: FleetHost, config: Mapping[str, Any], before: Before, turn: HostTurn
) -> gates.GateResult:
    """Measured, and when below the band measured again (``confirmations`` times): a host
    whose neighbours took the CPU for a minute is not rolled back for it; a slower server
    is slower every time."""
    status = sessions.read_status(hctx.conn, serve_vllm.state_path(host.server_args), "")
    key = baseline_key(hctx, host.served_name, status.record)
    rounds: list[gates.GateResult] = []
    for attempt in range(1 + int(config["confirmations"])):
        if attempt:
            hctx.progress(f"{host.name}: performance below the band, measuring again ({attempt})")
        try:  # the new server is fresh: warmed up before its first round, not again after
            samples = (_warm_then_measure(hctx, host, config, turn) if not attempt
                       else gates.measure(hctx, endpoint(host), config))  # fmt: skip
        except TaskFailed as exc:  # failed requests, or check_serving's wedge verdict
            return gates.GateResult("performance", False, exc.msg, dict(exc.data))
        for sample in samples:
            record(key, sample.as_data(), "rollout: after the change", turn.rollout_id)
        rounds.append(gates.performance(before.samples, samples, config))
        if rounds[-1].passed:
            break
    last = rounds[-1]
    return gates.GateResult(
        last.gate, last.passed, last.summary, {**last.evidence, "rounds": [r.as_data() for r in rounds[:-1]]}
    )


def roll_back(ctx: TaskContext, host: FleetHost, before: Before, config: Mapping[str, Any], turn: HostTurn) -> None:
    """The kept config files written back, then the recorded previous server again, checked
    with the golden prompts it answered."""
    hctx = host.context(ctx, planning=False)
    files = checkpoint.put_back(hctx, before.kept)
    turn.step("config files put back", **files)
    back = restore.relaunch(
        hctx,
        before.record,
        api_key=api_key(host.server_args["api_key_env"]),
        ready_timeout_s=float(host.server_args["ready_timeout_s"]),
        stop_timeout_s=float(host.server_args["stop_timeout_s"]),
    )
    checks: list[dict[str, Any]] = []
    golden_cfg = config.get("golden")
    if golden_cfg:
        again = gates.ask_golden(hctx, endpoint(host), golden_cfg["prompts"], golden_cfg["max_tokens"])
        check = gates.golden(golden_cfg["prompts"], before.golden, again)
        checks.append(check.as_data())
        if not check.passed:
            raise TaskFailed(f"rollout: {host.name} rolled back, but the previous server answers differently now: "
                             + check.summary)  # fmt: skip
    turn.rolled_back = {**back, "files": files, "checks": checks}
    turn.step("rolled back", **back)


def would_change(host: str, planned: Planned) -> dict[str, Any]:
    """What the host would change, for --check: the patch's and serve_vllm's own plans and diffs."""
    changes = planned.changes()
    if not changes:
        unchanged = [p.msg for p in (planned.patch, planned.serve) if isinstance(p, Unchanged)]
        return {"host": host, "change": "none: " + "; ".join(unchanged), "diffs": []}
    return {
        "host": host,
        "change": "; ".join(c.summary for c in changes),
        "diffs": [{"label": d.label, "before": d.before, "after": d.after} for c in changes for d in c.diffs],
    }

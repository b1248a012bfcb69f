"""Roll a vLLM serving change across hosts in gated batches behind HAProxy, rolling a host
back by itself when a gate fails.

Run it once for the fleet (`run_once: true` in a play over the hosts): `hosts` (default:
the play's) each serve a model with serve_vllm and sit in one HAProxy backend (`router`,
reached on the task's host or `router.host`). `server` is the new spec (serve_vllm's
arguments; `host_server` overrides per host, e.g. the port). The canary batch (`canary`
hosts) goes first, then batches of Ansible's `serial` sizes (counts or percentages). For
each host of a batch: drain it in HAProxy and wait until its requests in flight have
finished (add vLLM's `--shutdown-timeout` to the spec to let vLLM itself finish what it
holds when stopped); ask the golden prompts and measure it, as the previous server; keep
the bytes of the model's config files it was launched with; make the release's
`checkpoint_patch` (patch_quant_config's arguments, e.g. `kv_cache_dtype: auto`;
`host_checkpoint_patch` overrides per host, e.g. the path) with patch_quant_config's own
plan and apply; apply the new spec with serve_vllm (its staged readiness is the first
gate); run the gates (golden prompts answered as before at temperature 0; where the
playbook declares tools or a JSON schema, answers constrained to them by vLLM's structured
outputs parse and validate against them; tokens/s and TTFT p50/p95 against the figures
just taken, judged with the noise band of the repeated measurements and a relative
threshold); put it back in routing. A failed gate, or an error
once the change has begun, puts the host back on the server it ran before: the config
files get their kept bytes back (a `.rigger-orig` backup the patch made is renamed back
over its file, so a symlink returns as the same link and no backup is left; one that was
there before stays), then the argv and environment serve_vllm recorded run again (the vLLM
build they name); the files restored are in the turn's record. A config file whose digest
is not the recorded one when the turn starts has drifted: the turn names it, and a
rollback does not touch it unless the patch edited it. The host is checked with the golden
prompts, put back in routing, and the rollout stops: a failure on the canary always stops
it, later ones once more than `max_fail_percentage` of all the hosts have failed (counted
across batches). A host is never taken out while it is the last one HAProxy sees serving;
a batch that would empty the backend is refused before anything changes.
`router.endpoints_file` also keeps a JSON list of the servers in routing for a gateway
that watches a file: a host leaves it before HAProxy drains it and comes back once HAProxy
sees it UP (modules/routing/endpoints_file.py).

With `engine_cache: {cache_root}` (the new spec's VLLM_CACHE_ROOT), the canary's compile
and autotune cache is captured once it passed its gates and seeded to the later batches'
hosts whose own cache key matches (modules/rollout/warmcache.py), so they start warm; a
cache that cannot be captured or seeded is recorded and the rollout goes on.

Check mode shows the whole schedule: the batches, the gates, and what each host would
change: the patch's diffs of each file, and serve_vllm's own plan and diffs against the
config files as the patch would leave them. An upgraded host keeps the patch and its
backups (patch_quant_config `state: restored` puts the originals back). The rollout record
(every step, every gate's evidence, what was rolled back) is the task's data (the events
stream), a row of the controller's baseline store, and a JSON file beside it:
`rigger show FILE` renders it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.module_api import Change, Diff, Result, TaskContext, TaskFailed, Unchanged
from modules.rollout import fleet as fleets
from modules.rollout import gates, hoststep, journal, warmcache
from modules.routing import haproxy
from modules.routing.endpoints_file import Endpoint, EndpointsFile, url_for
from modules.serving.serve_vllm import SCHEMA as SERVE_SCHEMA

SIZE = {"type": ["integer", "string"], "minimum": 1, "pattern": r"^[0-9]+(\.[0-9]+)?%$"}
SERVE_ARGS = {k: v for k, v in SERVE_SCHEMA["properties"].items() if k != "state"}
GOLDEN_DEFAULTS = {"max_tokens": 16}
STRUCTURED_DEFAULTS = {"prompts": ["Reply with a JSON object."], "max_tokens": 128}
PERFORMANCE_DEFAULTS = {"requests": 8, "concurrency": 4, "max_tokens": 32, "repeats": 3, "warmup": 1,
                        "relative": 0.25, "ttft_relative": 0.5, "noise_k": 3.0, "confirmations": 1}  # fmt: skip

TOOL = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "parameters"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[A-Za-z0-9_-]{1,64}$"},
        "description": {"type": "string"},
        "parameters": {"type": "object", "description": "A JSON schema: the call's arguments."},
    },
}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["server", "router"],
    "properties": {
        "hosts": {
            "type": ["array", "null"],
            "items": {"type": "string", "minLength": 1},
            "default": None,
            "description": "Inventory hosts to roll out to, in order; default: the play's hosts.",
        },
        "server": {
            "type": "object",
            "required": ["name", "model"],
            "additionalProperties": False,
            "properties": SERVE_ARGS,
            "description": "The new spec: serve_vllm's arguments (`state` aside).",
        },
        "host_server": {
            "type": "object",
            "additionalProperties": {"type": "object", "additionalProperties": False, "properties": SERVE_ARGS},
            "default": {},
            "description": "Host -> serve_vllm arguments that differ on that host (its port).",
        },
        "checkpoint_patch": {
            "type": ["object", "null"],
            "additionalProperties": False,
            "properties": fleets.PATCH_ARGS,
            "default": None,
            "description": "The release's edit of the checkpoint's JSON files: patch_quant_config's "
            "arguments (`state` aside), made on each host after it is drained and measured, before "
            "the new spec starts; a rollback puts the files back as they were.",
        },
        "host_checkpoint_patch": {
            "type": "object",
            "additionalProperties": {"type": "object", "additionalProperties": False, "properties": fleets.PATCH_ARGS},
            "default": {},
            "description": "Host -> patch_quant_config arguments that differ on that host (its `path`).",
        },
        "canary": {**SIZE, "default": 1, "description": "Hosts in the first batch (a count or a percentage)."},
        "serial": {
            "type": "array",
            "items": SIZE,
            "default": [1],
            "description": "Sizes of the batches after the canary, as Ansible's `serial` (counts or "
            "percentages of all the hosts; the last repeats).",
        },
        "engine_cache": warmcache.SCHEMA,
        "max_fail_percentage": {
            "type": "number",
            "minimum": 0,
            "maximum": 100,
            "default": 0,
            "description": "Stop once more than this percentage of all the hosts failed a gate "
            "(across batches). A failure on the canary always stops.",
        },
        "router": {
            "type": "object",
            "additionalProperties": False,
            "required": ["socket", "backend"],
            "properties": {
                "socket": {"type": "string", "minLength": 1, "description": "HAProxy's admin stats socket."},
                "backend": {"type": "string", "pattern": r"^[A-Za-z0-9_.:-]+$", "description": "Its backend."},
                "servers": {
                    "type": "object",
                    "additionalProperties": {"type": "string", "pattern": r"^[A-Za-z0-9_.:-]+$"},
                    "description": "Host -> its server's name in the backend (default: the host's name).",
                },
                "host": {
                    "type": ["string", "null"],
                    "description": "Inventory host HAProxy runs on (default: the task's).",
                },
                "drain_timeout_s": {
                    "type": "number",
                    "minimum": 0,
                    "description": "Seconds for requests in flight (120).",
                },
                "endpoints_file": {
                    "type": ["string", "null"],
                    "pattern": "^/",
                    "description": "Also keep this JSON file of the servers in routing (on HAProxy's host), "
                    "for a gateway that watches a file: a host leaves it before it is drained and comes "
                    "back once HAProxy sees it UP.",
                },
            },
            "description": "The load balancer in front of the hosts (HAProxy's runtime API).",
        },
        "gates": {
            "type": "object",
            "additionalProperties": False,
            "default": {},
            "properties": {
                "golden": {
                    "type": ["object", "null"],
                    "additionalProperties": False,
                    "required": ["prompts"],
                    "properties": {
                        "prompts": {
                            "type": "array",
                            "minItems": 1,
                            "items": {"type": "string"},
                            "description": "Prompts answered at temperature 0.",
                        },
                        "max_tokens": {"type": "integer", "minimum": 1, "description": "Tokens per answer (16)."},
                    },
                    "description": "Golden prompts: the new server must answer them as the previous one did.",
                },
                "structured": {
                    "type": ["object", "null"],
                    "additionalProperties": False,
                    "anyOf": [{"required": ["tools"]}, {"required": ["json_schema"]}],
                    "properties": {
                        "tools": {
                            "type": "array",
                            "minItems": 1,
                            "items": TOOL,
                            "description": "OpenAI-style function tools ({name, description, parameters}); "
                            "each is asked for by name (`tool_choice`) with every prompt. The server needs "
                            "`--enable-auto-tool-choice --tool-call-parser NAME` (else vLLM answers 400).",
                        },
                        "json_schema": {
                            "type": "object",
                            "description": "A JSON schema each prompt's completion is constrained to "
                            "(`response_format`).",
                        },
                        "prompts": {
                            "type": "array",
                            "minItems": 1,
                            "items": {"type": "string"},
                            "description": "Prompts asked at temperature 0 (one generic prompt).",
                        },
                        "max_tokens": {"type": "integer", "minimum": 1, "description": "Tokens per answer (128)."},
                    },
                    "description": "Tool calls and JSON-schema answers, constrained by vLLM's structured "
                    "outputs, must parse and validate against the declared schemas.",
                },
                "performance": {
                    "type": ["object", "null"],
                    "additionalProperties": False,
                    "properties": {
                        **{
                            k: {"type": "integer", "minimum": 1, "description": f"check_serving's {k}."}
                            for k in ("requests", "concurrency", "max_tokens")
                        },
                        "repeats": {
                            "type": "integer",
                            "minimum": 1,
                            "description": "Measurements before and after (3).",
                        },
                        "warmup": {
                            "type": "integer",
                            "minimum": 0,
                            "description": "Load tests run and not judged before the measurements before, and "
                            "before the first after the change: a server just started (by the change, a "
                            "rollback, a restart) is slower at its first requests and would widen the band (1).",
                        },
                        "relative": {"type": "number", "minimum": 0, "description": "Tokens/s drop that fails (0.25)."},
                        "ttft_relative": {"type": "number", "minimum": 0, "description": "TTFT rise that fails (0.5)."},
                        "noise_k": {"type": "number", "minimum": 0, "description": "Spreads of noise tolerated (3)."},
                        "confirmations": {
                            "type": "integer",
                            "minimum": 0,
                            "description": "Measure again this many times before a result below the band fails (1).",
                        },
                    },
                    "description": "Tokens/s and TTFT against the host's figures before the change.",
                },
            },
            "description": "The gates after readiness (always on), in order: `golden`, `structured`, "
            "`performance` (null or absent: off; `performance` is on by default).",
        },
    },
}


def _config(args: Mapping[str, Any]) -> dict[str, Any]:
    given = dict(args["gates"])
    golden = given.get("golden")
    structured = given.get("structured")
    performance = given.get("performance", {})
    config = {
        "golden": {**GOLDEN_DEFAULTS, **golden} if golden else None,
        "structured": {**STRUCTURED_DEFAULTS, **structured} if structured else None,
        "performance": {**PERFORMANCE_DEFAULTS, **performance} if performance is not None else None,
    }
    problems = gates.structured_problems(config["structured"]) if config["structured"] else []
    if problems:  # before anything is drained: a typo in a schema would fail every host's gate
        raise TaskFailed(f"rollout: gates.structured: {'; '.join(problems)}")
    return config


def _router(ctx: TaskContext, args: Mapping[str, Any], hosts: Sequence[fleets.FleetHost]) -> hoststep.Router:
    router = args["router"]
    return hoststep.Router(
        fleets.lb_connection(ctx, args),
        haproxy.Backend(str(router["socket"]), str(router["backend"])),
        float(router.get("drain_timeout_s", 120)),
        _endpoints_file(ctx, router, hosts),
    )


def _endpoints_file(
    ctx: TaskContext, router: Mapping[str, Any], hosts: Sequence[fleets.FleetHost]
) -> EndpointsFile | None:
    path = router.get("endpoints_file")
    if not path:
        return None
    hostvars = ctx.vars.get("hostvars") or {}
    entries = {
        h.name: Endpoint(h.name, url_for(hostvars.get(h.name) or {}, h.name, h.port), h.served_name) for h in hosts
    }
    return EndpointsFile(str(path), str(router["backend"]), entries)


def _gate_names(config: Mapping[str, Any]) -> list[str]:
    names = ["readiness"]
    if config["golden"]:
        names.append(f"golden ({len(config['golden']['prompts'])} prompts)")
    if config["structured"]:
        s = config["structured"]
        asked = ([f"tools {', '.join(t['name'] for t in s['tools'])}"] if s.get("tools") else []) + (
            ["JSON schema"] if s.get("json_schema") is not None else []
        )
        names.append(f"structured ({'; '.join(asked)}; {len(s['prompts'])} prompts)")
    if config["performance"]:
        p = config["performance"]
        names.append(f"performance ({p['repeats']}x{p['requests']} requests after {p['warmup']} warm-up, "
                     f"-{p['relative']:.0%} tokens/s "
                     f"+{p['ttft_relative']:.0%} TTFT beyond {p['noise_k']:g} spreads)")  # fmt: skip
    return names


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    config = _config(args)
    hosts = fleets.fleet(ctx, args)
    router = _router(ctx, args, hosts)
    found = haproxy.servers(router.conn, router.backend)
    haproxy.known(found, [h.lb_server for h in hosts], router.backend)
    if router.endpoints:
        router.endpoints.current(router.conn)  # someone else's file fails here, before anything
    planned = {h.name: hoststep.plan_host(ctx, h) for h in hosts}
    changes = {name: hoststep.would_change(name, p) for name, p in planned.items()}
    pending = [h for h in hosts if changes[h.name]["diffs"] or not changes[h.name]["change"].startswith("none")]
    if not pending:
        return Unchanged(f"every host ({', '.join(h.name for h in hosts)}) already serves this spec")
    for host in pending:
        hoststep.previous_record(ctx, host)
    batches = fleets.schedule([h.name for h in pending], args["canary"], args["serial"])
    fleets.refuse_empty_batches(batches, hosts, found, router.backend)
    patched = any(h.checkpoint_patch for h in pending)
    schedule_text = journal.schedule_text(batches, _gate_names(config), args["max_fail_percentage"], len(pending),
                                          patched)  # fmt: skip
    diffs = [Diff("rollout schedule", "", schedule_text)]
    for name, change in changes.items():
        diffs += [Diff(f"{name}: {d['label']}", d["before"], d["after"]) for d in change["diffs"]]
    return Change(
        summary=f"roll out to {len(pending)} hosts in {len(batches)} batches (canary {', '.join(batches[0])}); "
        f"gates: {', '.join(_gate_names(config))}",
        diffs=tuple(diffs),
        payload={"batches": batches, "changes": changes},
        fingerprint={f"{h.name}:{k}": v for h in pending for k, v in planned[h.name].fingerprint().items()},
    )


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    hosts = {h.name: h for h in fleets.fleet(ctx, args)}
    config = _config(args)
    run = journal.Journal.start(change.payload["batches"], _gate_names(config), args["max_fail_percentage"])
    router = _router(ctx, args, list(hosts.values()))
    for index, batch in enumerate(change.payload["batches"]):
        for name in batch:
            ctx.progress(f"rollout batch {index + 1}/{len(change.payload['batches'])}: {name}")
            run.add(_turn(ctx, hosts[name], router, config, run.rollout_id))
        stop = run.stop_reason(index)
        if stop:
            run.finish("stopped", stop)
            record = run.saved()
            raise TaskFailed(run.failure_message(), {"rollout": record})
        later = [hosts[n] for b in change.payload["batches"][index + 1 :] for n in b]
        if index == 0 and args["engine_cache"] and later:
            ctx.progress("rollout: capture the canary's engine cache, seed the later batches")
            run.engine_cache = warmcache.warm(ctx, args["engine_cache"], hosts[batch[0]], later)
    run.finish("completed", None)
    record = run.saved()
    return Result(changed=True, msg=run.success_message(), diffs=change.diffs, data={"rollout": record})


def _turn(
    ctx: TaskContext, host: fleets.FleetHost, router: hoststep.Router, config: Mapping[str, Any], rollout_id: str
) -> hoststep.HostTurn:
    turn = hoststep.HostTurn(host.name, rollout_id)
    changed = False
    before = None
    try:
        router.take_out(host, turn, ctx.progress)
        before = hoststep.measure_before(ctx, host, config, turn)
        changed = True
        hoststep.patch_checkpoint(ctx, host, turn)
        ready = hoststep.apply_change(ctx, host, turn)
        results = [ready] + (hoststep.run_gates(ctx, host, config, before, turn) if ready.passed else [])
        turn.gates = [r.as_data() for r in results]
        if all(r.passed for r in results):
            turn.outcome = "upgraded"
        else:
            hoststep.roll_back(ctx, host, before, config, turn)
            turn.outcome = "rolled back"
        router.put_back(host, turn)
    except TaskFailed as exc:
        turn.outcome = f"failed: {exc.msg}"
        turn.step("error", message=exc.msg)
        _recover(ctx, host, router, config, turn, before if changed else None)
    return turn


def _recover(
    ctx: TaskContext,
    host: fleets.FleetHost,
    router: hoststep.Router,
    config: Mapping[str, Any],
    turn: hoststep.HostTurn,
    before: hoststep.Before | None,
) -> None:
    """After an error mid-turn: the previous server back if the change had begun, then routing."""
    try:
        if before is not None and turn.rolled_back is None:
            hoststep.roll_back(ctx, host, before, config, turn)
        router.put_back(host, turn)
    except TaskFailed as exc:
        turn.step("left out of routing", message=exc.msg)

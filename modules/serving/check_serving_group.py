"""Check that a multi-node vLLM group really serves: every rank's processes on every node,
then a real completion. Changes nothing.

Run it like serve_vllm_group (`run_once: true` on the head) with the same group options
(one YAML anchor can feed both; the model options are not used here). The head alone is
not trusted: vLLM's API answers `/health` 200 for minutes after a worker rank died
(vLLM #16259), so each rank's recorded process is checked by pid and start time and each
node must still have all its `VLLM::Worker` processes (mp backend); with `ray`, the Ray
cluster must still show every node. Then a completion must come back from the head.
A rank whose process is stopped (T) or stuck in uninterruptible sleep (D) is wedged: named
with its state. Fails naming every rank that is down or wedged (without waiting on a
completion: with a pipeline stage gone a request hangs until its timeout) or what the
completion answered.

Check mode skips it: the group it would check is the one the play's earlier tasks would
have started, which check mode did not do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.module_api import Change, Result, ScopedConnection, TaskContext, TaskFailed
from modules.serving import group_status
from modules.serving.group import connection, resolve_layout
from modules.serving.group_status import base_url
from modules.serving.readiness import liveness
from modules.serving.serve_vllm_group import SCHEMA as GROUP_SCHEMA
from modules.serving.spec import served_name

CHECK_MODE = "measure"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "model"],
    "properties": {
        **{key: value for key, value in GROUP_SCHEMA["properties"].items() if key != "state"},
        "prompt": {
            "type": "string",
            "default": "The capital of France is",
            "description": "Prompt of the completion sent to the head.",
        },
        "max_tokens": {
            "type": "integer",
            "minimum": 1,
            "default": 4,
            "description": "Tokens the completion must generate.",
        },
        "request_timeout_s": {
            "type": "number",
            "exclusiveMinimum": 0,
            "default": 120,
            "description": "Seconds the completion may take.",
        },
    },
}


def _completion(ctx: TaskContext, args: Mapping[str, Any], head_conn: ScopedConnection) -> tuple[bool, str]:
    body = {"model": served_name(args), "prompt": args["prompt"], "max_tokens": args["max_tokens"], "temperature": 0}
    answer = head_conn.run_probe(
        "vllm_http",
        {
            "url": base_url(args) + "/v1/completions",
            "method": "POST",
            "json": body,
            "api_key": group_status.api_key(args),
            "timeout_s": args["request_timeout_s"],
        },
    )
    if answer["status"] == 200:
        return True, f"a {args['max_tokens']}-token completion came back"
    why = answer["error"] or f"HTTP {answer['status']}: {answer['body'][:300]}"
    return False, f"the completion failed: {why}"


def _wedged_ranks(ctx: TaskContext, states: Sequence[group_status.RankState]) -> list[str]:
    """Ranks alive but stuck: a process of theirs stopped (T) or in uninterruptible sleep (D)."""
    found = []
    for state in states:
        pids = [int(p) for p in (state.record.get("pid"), *state.workers) if p]
        if not pids or not state.server.leader_alive:
            continue
        answer = liveness(connection(ctx, state.node), pids, "", "", None, 1, processes_only=True)
        if answer["wedged"]:
            found.append(f"{state.node.label}: wedged: {answer['why']}")
    return found


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change:
    layout = resolve_layout(ctx, args)
    names = ", ".join(node.name for node in layout.nodes)
    return Change(summary=f"check every rank on {names} and send a completion to {base_url(args)}")


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    layout = resolve_layout(ctx, args)
    states = group_status.read_group(ctx, layout, args, served_name(args), group_status.api_key(args))
    down = [f"{node.label}: {why}" for node, why in group_status.problems(states, None, layout)]
    down.extend(_wedged_ranks(ctx, states))
    ray = group_status.ray_problem(ctx, args, layout)
    if ray:
        down.append(ray)
    # with a rank down, a request can hang until its timeout (the pipeline waits for the dead
    # stage): the processes already tell, so no completion is tried
    ok, said = (False, "no completion tried") if down else _completion(ctx, args, connection(ctx, layout.head))
    data = {
        "url": base_url(args),
        "ranks": [{"node": s.node.name, "rank": s.node.rank, "pid": s.record.get("pid"), "workers": list(s.workers)}
                  for s in states],
        "down": down,
        "completion": said,
    }  # fmt: skip
    if down or not ok:
        raise TaskFailed(
            f"vLLM group on {base_url(args)} is not serving: {'; '.join(down) or 'every rank is up'}; {said}", data
        )
    workers = sum(len(s.workers) for s in states)
    message = f"{len(states)} rank(s) alive ({workers} worker processes) on {len(layout.nodes)} nodes; {said}"
    return Result(changed=False, msg=message, data=data)

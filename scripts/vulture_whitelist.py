"""Names vulture cannot see used (run: vulture engine modules scripts/vulture_whitelist.py).

Keep it short: each entry says why it is used. Anything else vulture reports is dead code.
"""
# ruff: noqa: B018, F821
# mypy: ignore-errors

validate  # a click command (engine/cli.py)
list_modules  # a click command (engine/cli.py)
inventory_cmd  # a click command (engine/cli.py)
plan_cmd  # a click command (engine/cli.py)
apply_cmd  # a click command (engine/cli.py)
as_list  # rigger inventory --list: accepted as ansible-inventory's users type it; the listing is the default
truncated  # CommandResult field: registered output and tests read it
_.banner_timeout  # paramiko.Transport settings (engine/connection/ssh/transport.py)
_.handshake_timeout
_.auth_timeout
shared  # LockHandle field: read by callers and tests
MUTATES  # probe flag, read from the probe's source text (engine/probes)
USES  # probe dependencies, read from the probe's source text (engine/probes)
visit_Concat  # Jinja code generator hook (engine/templating/sandbox.py)
code_generator_class  # Jinja environment hooks (engine/templating/sandbox.py)
intercepted_binops
bounded_concat  # called from the code engine/templating/sandbox.py generates for `~`
_.peer  # TaskContext.peer: the serving group's modules (issue 15) use it
do_GET  # http.server calls it (engine/watch/metrics.py)
log_message  # http.server calls it (engine/watch/metrics.py)
since  # Pause field: written to the watch state file, read by people and tests
render_index  # docs/modules/README.md, written by scripts/gen_module_docs.py
room_of  # scripts/gen_module_docs.py groups the module reference by room
quarantine_list  # a click command (engine/cli.py)
quarantine_clear  # a click command (engine/cli.py)
baselines_cmd  # a click command (engine/cli.py)
row_factory  # sqlite3.Connection attribute (engine/baselines/store.py)
rollout  # BaselineStore.rollout/rollouts: stored rollout records read back (test_baselines.py); no command yet
rollouts
writelines  # MaskedStream.writelines (engine/mask.py): TextIO's, so no write goes around the mask
cache_proof  # loglines: cache used or not, from a start's log (bench/cache_bench.py; serve_vllm to call)

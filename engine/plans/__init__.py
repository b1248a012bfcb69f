"""Saved plans: `rigger plan` writes what a check-mode run would change, `rigger show`
renders it for review, `rigger apply` applies exactly that or refuses.

- planfile.py: the file format (dataclasses <-> JSON) and the digests of the inputs.
- secrets.py: what must never reach a plan file (secret-named variables, no_log steps).
- structured.py: a Diff as short change lines (JSON key paths, added/removed lines).
- recorder.py: a Sink that turns the run's events into a Plan.
- compare.py: a re-planned step against the reviewed one, differences named.
- gate.py: the executor hook that refuses any change that is not the reviewed one (and
  takes a "known after apply" step's fresh plan only when it is consistent with the review).
- review.py: what a reviewer reads: INCOMPLETE, the host-by-task matrix, each change once.
- factor.py: per-host changes that differ in a few words as one change and a per-host table.
- render.py / html.py: text, markdown and html reviews.

What planning predicts (the effects of earlier planned changes) is in
engine/connection/predicted.py; docs/plans.md describes the whole flow.
- commands.py: plan / show / apply, as the CLI calls them.

May import: engine.errors, engine.yamlload, engine.keypaths, engine.model, engine.registry,
engine.module_api, engine.inventory, engine.playbook, engine.run, engine.output, engine.connection,
engine.probes, engine.mask, engine.templating, engine.hosttext.
"""

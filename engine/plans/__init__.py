"""Saved plans: `rigger plan` writes what a check-mode run would change, `rigger show`
renders it for review, `rigger apply` applies exactly that or refuses.

- planfile.py: the file format (dataclasses <-> JSON) and the digests of the inputs.
- secrets.py: what must never reach a plan file (secret-named variables, no_log steps).
- structured.py: a Diff as short change lines (JSON key paths, added/removed lines).
- recorder.py: a Sink that turns the run's events into a Plan.
- compare.py: a re-planned step against the reviewed one, differences named.
- gate.py: the executor hook that refuses any change that is not the reviewed one.
- render.py / html.py: text, markdown and html reviews, identical changes grouped.
- commands.py: plan / show / apply, as the CLI calls them.
"""

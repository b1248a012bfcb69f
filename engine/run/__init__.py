"""Package ``engine.run``: executing plays on hosts.

``runner.py`` runs plays x hosts (forks, the linear strategy, serial batches from
``batches.py``, handlers, blocks), ``executor.py`` runs one task on one host (when, loop,
args, plan/apply, retries, register), and ``hostlocks.py`` takes and releases every host's
run lock for a run.

May import: engine.errors, engine.yamlload, engine.model, engine.registry, engine.facts,
engine.probes, engine.connection, engine.runlock, engine.templating, engine.inventory,
engine.playbook, engine.module_api, engine.output, engine.mask, engine.controller_files,
engine.schema_words.
"""

"""rigger: a declarative playbook engine for GPU inference hosts.

The engine is generic (the domains live in ``modules/<room>/``). Its packages, lowest first;
each package's docstring says what it owns and what it may import, and
tests/unit/test_engine_imports.py holds the tree to that with no import cycle:

- ``errors.py``, ``yamlload.py``, ``keypaths.py``, ``model.py`` (the playbook and inventory
  as frozen values): the ground everything stands on.
- ``probes/``: stdlib-only programs that run on the host; ``runlock/``: one run at a time
  per host; ``connection/``: how a host is reached (local, SSH, the remote interpreter).
- ``templating/``: expressions, filters, lookups, variables; ``inventory/``: hosts, groups,
  patterns; ``registry.py``: the rooms' modules; ``facts.py``: host facts.
- ``playbook/``: YAML to ``model`` values, roles, includes, static checks.
- ``module_api.py``: everything a module may import; ``output/``: the terminal and JSONL.
- ``run/``: the runner and the executor; ``plans/``: plan, show, apply; ``docs.py``.
- ``cli.py``: the command line, the only place that exits.
"""

__version__ = "0.1.0"

"""Package ``engine.watch``: ``rigger watch`` keeps a fleet in its declared state between runs.

Every interval it plans the playbook (check mode, a plan file a person can review and
apply), and per host applies only the classes of change the playbook declares
self-healable (``policy.py``), while the host's repair budget allows (``store.py``: at most
N repairs per window, exponential backoff, pauses that survive a restart). Everything else
is reported as drift and left for a person. ``cycle.py`` is one round, ``loop.py`` the
rounds and a clean stop, ``metrics.py`` the Prometheus text endpoint, ``status.py`` the
compact per-host view. Connections stay open between rounds (engine.connection.warm); run
locks do not: each round takes them only while it changes a host.

May import: engine.errors, engine.model, engine.registry, engine.connection,
engine.runlock, engine.module_api, engine.output, engine.playbook, engine.inventory,
engine.templating, engine.run, engine.plans, engine.mask, engine.probes.
"""

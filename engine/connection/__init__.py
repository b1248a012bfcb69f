"""Connections: how the engine reaches a host (local subprocess, SSH).

``base.py`` is the protocol and the scoped (planning-aware) wrapper, ``local.py`` the
local subprocess, ``ssh/`` paramiko, ``remote_python/`` the persistent interpreter on the
host, ``factory.py`` picks one for a host, ``capture.py`` records output bounded.

May import: engine.errors, engine.model, engine.probes, engine.runlock.
"""

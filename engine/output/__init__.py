"""Output: the only place that writes to the terminal.

``events.py`` defines the events a run emits, ``console.py`` renders them for people,
``jsonl.py`` for machines.

May import: engine.module_api, engine.hosttext.
"""

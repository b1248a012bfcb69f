"""The rooms: one package per domain, holding its task modules, their helpers and probes.

``basic`` (command, files, facts, assertions), ``gpu`` (GPUs, /dev/shm), ``checkpoints``
(Hugging Face models on the host), ``serving`` (vLLM). Each room's ``__init__`` lists its
task modules in ``MODULES``; its host-side probes live in ``<room>/probes/``.
"""

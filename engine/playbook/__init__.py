"""Package ``engine.playbook``: playbooks from YAML to frozen values, checked before any host
is touched.

``loader.py`` reads a playbook into ``engine.model`` values (file:line in every error),
``includes.py`` and ``roles.py`` resolve roles, imports and includes, ``kvargs.py`` splits
``key=value`` arguments, ``loops.py`` shapes ``loop:``/``with_*`` items, ``tags.py``
selects by ``--tags``, ``unsupported.py`` refuses Ansible keywords rigger lacks by name,
and ``static_check.py`` finds undefined variables before a run; ``hostcheck.py`` reads the
inventory's host patterns so that validate names a play that targets no host.

May import: engine.errors, engine.yamlload, engine.model, engine.registry, engine.facts, engine.config,
engine.templating, engine.inventory, engine.schema_words, engine.argvalues.
"""

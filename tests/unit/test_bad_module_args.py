"""Module arguments of the wrong type, down to list items: exit 4 with file:line, no host touched.

Real: the CLI in a subprocess, the YAML loader, each module's JSON Schema. The first task
would create a file; it must never run.
"""

from __future__ import annotations

import pytest
from test_bad_input import _playbook

CASES = {
    "a list where a string belongs": (
        """\
            - ensure_absent:
                path:
                  - /tmp/x
        """,
        "path: ['/tmp/x'] is not of type 'string'",
        7,
    ),
    "a mapping where a string belongs": (
        """\
            - ensure_absent:
                path:
                  at: /tmp/x
        """,
        "path: {'at': '/tmp/x'} is not of type 'string'",
        7,
    ),
    "a number in a list of patterns": (
        """\
            - ensure_shm_clean:
                patterns:
                  - psm_*
                  - 1
        """,
        "patterns.1: 1 is not of type 'string'",
        9,
    ),
    "a list in a list of owners": (
        """\
            - ensure_shm_clean:
                owners:
                  - [1]
        """,
        "owners.0: [1] is not of type 'string', 'integer'",
        8,
    ),
    "a number in a list of key paths": (
        """\
            - patch_quant_config:
                path: /models/m
                remove:
                  config.json:
                    - quantization_config
                    - 7
        """,
        "remove.config.json.1: 7 is not of type 'string'",
        11,
    ),
    "a string where a mapping of keys belongs": (
        """\
            - patch_quant_config:
                path: /models/m
                set:
                  config.json:
                    - a
        """,
        "set.config.json: ['a'] is not of type 'object'",
        9,
    ),
    "a list where a mode belongs": (
        """\
            - write_file:
                path: /tmp/x
                content: a
                mode:
                  - 644
        """,
        "mode: [644] is not of type 'string'",
        9,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_wrong_argument_types_exit_4_with_the_line(rigger, tmp_path, case):
    """Fails today for the first case: locating the error crashed with exit 250."""
    body, message, line = CASES[case]
    marker = tmp_path / "touched"
    book = tmp_path / "play.yml"
    book.write_text(_playbook(marker, body))
    run = rigger("run", str(book))
    assert run.rc == 4, run.stderr + run.stdout
    assert f"{book}:{line}: {message}" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr + run.stdout and "a bug" not in run.stderr
    assert not marker.exists()

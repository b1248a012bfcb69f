"""A task's loop items: ``loop:`` as given, and the ``with_<lookup>`` forms of older
playbooks, shaped as Ansible's lookups shape them (``with_items`` flattens one level,
``with_dict`` gives ``item.key``/``item.value``, ``with_nested`` every combination,
``with_sequence`` numbers as strings, ``with_first_found`` the first file that exists,
``with_fileglob`` the controller's files a pattern matches)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.templating.filters import flatten
from engine.templating.listfilters import subelements
from engine.templating.lookups import fileglob, search_path

# ansible.builtin's loop lookups, and community.general's flattened (cartesian is not here)
WITH_KINDS = frozenset(
    {
        "items",
        "list",
        "dict",
        "indexed_items",
        "nested",
        "together",
        "first_found",
        "sequence",
        "subelements",
        "flattened",
        "fileglob",
    }
)
# with_first_found looks in the folder its task's action reads from (Ansible's task
# executor: an action named *template* -> templates/, *var* -> vars/, else files/)
_SUBDIRS = (("template", "templates"), ("var", "vars"), ("file", "files"))
_NUM = "0?x?[0-9a-f]+"  # Ansible's sequence lookup's shortcut pattern
_SHORTCUT = re.compile(
    f"^(?:(?P<start>{_NUM})-)?(?P<end>{_NUM})(?:/(?P<stride>{_NUM}))?(?::(?P<format>.+))?$", re.IGNORECASE
)


def source(data: Mapping[str, Any]) -> tuple[str, Any]:
    """(kind, raw value) of the task's loop; kind "loop" for ``loop:``, "" for none."""
    if data.get("loop") is not None:
        return "loop", data["loop"]
    for kind in sorted(WITH_KINDS):
        if data.get(f"with_{kind}") is not None:
            return kind, data[f"with_{kind}"]
    return "", None


def _flatten_once(values: list[Any]) -> list[Any]:
    return [x for v in values for x in (v if isinstance(v, list) else [v])]


def _number(text: str) -> int:
    """Decimal only: ansible-core 2.19 checks the lookup's options as integers, so its
    shortcut pattern still matches ``0x0a`` but then refuses it."""
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"with_sequence: can't parse {text!r} as an integer") from None


def sequence(term: str) -> list[str]:
    """``with_sequence: start=1 end=5 stride=2 format=node%02d`` (or ``1-5/2:node%02d``,
    ``count=3``): the numbers formatted, as strings (Ansible's sequence lookup)."""
    params: dict[str, str] = {}
    shortcut = _SHORTCUT.match(term.strip()) if "=" not in term else None
    if shortcut:
        params = {k: v for k, v in shortcut.groupdict().items() if v is not None}
    else:
        for word in term.split():
            key, sep, value = word.partition("=")
            if not sep or key not in ("start", "end", "count", "stride", "format"):
                raise ValueError(f"with_sequence: can't parse {word!r} (start=, end=, count=, stride=, format=)")
            params[key] = value
    start, stride = _number(params.get("start", "1")), _number(params.get("stride", "1"))
    if "count" in params and "end" in params:
        raise ValueError("with_sequence: can't specify both count and end")
    if "count" not in params and "end" not in params:
        raise ValueError("with_sequence: must specify count or end")
    if "count" in params:
        count = _number(params["count"])
        if count == 0:
            return []
        end = start + count * stride - 1
    else:
        end = _number(params["end"])
    if stride > 0 and end < start:
        raise ValueError("with_sequence: to count backwards make stride negative")
    if stride < 0 and end > start:
        raise ValueError("with_sequence: to count forward don't make stride negative")
    if stride == 0:
        return []
    fmt = params.get("format", "%d")
    if fmt.count("%") != 1:
        raise ValueError(f"with_sequence: bad formatting string: {fmt}")
    try:
        return [fmt % number for number in range(start, end + (1 if stride > 0 else -1), stride)]
    except (ValueError, TypeError):
        raise ValueError(f"with_sequence: problem formatting with {fmt!r}") from None


def first_found(rendered: Any, variables: Mapping[str, Any], action: str) -> list[str]:
    """The first file of the terms that exists, searched as Ansible's with_first_found does:
    the role's <subdir>/ and the role, then the playbook's <subdir>/ and the playbook dir."""
    terms = rendered if isinstance(rendered, list) else [rendered]
    files: list[str] = []
    paths: list[str] = []
    skip = False
    for term in terms:
        if isinstance(term, Mapping):
            files += [str(f) for f in flatten([term.get("files", [])])]
            paths += [str(p) for p in flatten([term.get("paths", [])])]
            skip = skip or bool(term.get("skip", False))
        else:
            files += [str(f) for f in flatten([term])]
    subdir = next((folder for word, folder in _SUBDIRS if word in action), "files")
    roots = [base / sub for base in search_path(variables) for sub in (subdir, "")]
    for name in files:
        for folder in ([Path(p) for p in paths] if paths else []) + [Path("/")] * Path(name).is_absolute() + roots:
            candidate = folder / name
            if candidate.exists():
                return [str(candidate)]
    if skip:
        return []
    raise ValueError("with_first_found: none of the files was found: " + ", ".join(files))


def items(kind: str, rendered: Any, variables: Mapping[str, Any] | None = None, action: str = "") -> list[Any]:
    """The items to run over; ValueError says what is wrong with the rendered value.
    ``variables`` and ``action`` (the task's module) are where with_first_found looks."""
    if kind == "first_found":
        return first_found(rendered, variables or {}, action)
    if kind == "fileglob":
        return fileglob(variables or {}, rendered if isinstance(rendered, list) else [rendered], {})
    if kind == "sequence":
        terms = rendered if isinstance(rendered, list) else [rendered]
        return [number for term in terms for number in sequence(str(term))]
    if kind == "flattened":
        return flatten(rendered if isinstance(rendered, list) else [rendered], skip_nulls=False)
    if kind == "subelements":
        if not isinstance(rendered, list) or len(rendered) not in (2, 3):
            raise ValueError("with_subelements needs a list and a key: [users, 'groups'] (and {skip_missing: true})")
        flags = rendered[2] if len(rendered) == 3 and isinstance(rendered[2], Mapping) else {}
        return subelements(rendered[0], rendered[1], bool(flags.get("skip_missing", False)))
    if kind == "dict":
        if not isinstance(rendered, Mapping):
            raise ValueError(f"with_dict needs a mapping, got {type(rendered).__name__}")
        return [{"key": k, "value": v} for k, v in rendered.items()]
    if kind == "items" and not isinstance(rendered, list):
        rendered = [rendered]
    if not isinstance(rendered, list):
        raise ValueError(f"loop must be a list, got {type(rendered).__name__}")
    if kind == "items":
        return _flatten_once(rendered)
    if kind == "indexed_items":
        return [[i, x] for i, x in enumerate(_flatten_once(rendered))]
    if kind == "nested":
        lists = [x if isinstance(x, list) else [x] for x in rendered]
        return [list(combo) for combo in itertools.product(*lists)]
    if kind == "together":
        lists = [x if isinstance(x, list) else [x] for x in rendered]
        return [list(combo) for combo in itertools.zip_longest(*lists)]
    return rendered

"""Ansible's lookups on the controller: env, file, template, pipe, vars, first_found, fileglob,
password (password_lookup.py) and community.general's flattened.

``lookup(name, ...)`` joins a list of strings with commas (``wantlist=True`` keeps the
list); ``query(name, ...)`` / ``q`` always gives the list. Relative files are searched
as Ansible does for a playbook: ``<playbook_dir>/files/`` (``templates/`` for template)
then ``<playbook_dir>/``.
"""

from __future__ import annotations

import glob
import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jinja2

from engine import controller_files
from engine.templating.password_lookup import password
from engine.templating.sandbox import MAX_SIZE

Lookup = Callable[[Mapping[str, Any], list[Any], dict[str, Any]], list[Any]]


class LookupFailed(Exception):
    """A lookup that cannot answer (file not found, command failed)."""


def _terms(terms: tuple[Any, ...]) -> list[Any]:
    flat: list[Any] = []
    for term in terms:
        flat += term if isinstance(term, list) else [term]
    return flat


def _search(variables: Mapping[str, Any], subdir: str, name: str) -> Path | None:
    path = Path(str(name))
    if path.is_absolute():
        return path if controller_files.exists(path) else None
    base = Path(str(variables.get("playbook_dir", ".")))
    for candidate in (base / subdir / path, base / path):
        if controller_files.exists(candidate):
            return candidate
    return None


def _env(variables: Mapping[str, Any], terms: list[Any], kw: dict[str, Any]) -> list[Any]:
    default = kw.get("default", "")
    return [os.environ.get(str(term), default) for term in terms]


def _read(variables: Mapping[str, Any], subdir: str, term: Any, lookup: str) -> str:
    path = _search(variables, subdir, term)
    if path is None or not controller_files.is_file(path):
        raise LookupFailed(f"the '{lookup}' lookup could not locate file {term!r}")
    if controller_files.size(path) > MAX_SIZE:  # engine/templating/sandbox.py's bound on what a template may build
        raise LookupFailed(f"the '{lookup}' lookup: {path} is larger than {MAX_SIZE} bytes")
    return controller_files.read_text(path)


def _file(variables: Mapping[str, Any], terms: list[Any], kw: dict[str, Any]) -> list[Any]:
    found = []
    for term in terms:
        text = _read(variables, "files", term, "file")
        if kw.get("rstrip", True):
            text = text.rstrip()
        if kw.get("lstrip", False):
            text = text.lstrip()
        found.append(text)
    return found


def template_lookup(render_text: Callable[[str, Mapping[str, Any]], str]) -> Lookup:
    """The ``template`` lookup over the renderer it is given: ``engine.templating`` passes
    its own, so this file never imports the package that imports it."""

    def _template(variables: Mapping[str, Any], terms: list[Any], kw: dict[str, Any]) -> list[Any]:
        return [render_text(_read(variables, "templates", term, "template"), variables) for term in terms]

    return _template


def _pipe(variables: Mapping[str, Any], terms: list[Any], kw: dict[str, Any]) -> list[Any]:
    outputs = []
    for term in terms:
        proc = subprocess.run(str(term), shell=True, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise LookupFailed(f"the 'pipe' lookup: {term!r} exited {proc.returncode}: {proc.stderr.strip()}")
        outputs.append(proc.stdout.rstrip())
    return outputs


def _vars(variables: Mapping[str, Any], terms: list[Any], kw: dict[str, Any]) -> list[Any]:
    values = []
    for term in terms:
        if term in variables:
            values.append(variables[term])
        elif "default" in kw:
            values.append(kw["default"])
        else:
            raise LookupFailed(f"the 'vars' lookup: no variable named {term!r}")
    return values


def _first_found(variables: Mapping[str, Any], terms: list[Any], kw: dict[str, Any]) -> list[Any]:
    files: list[Any] = []
    paths: list[str] = []
    for term in terms:
        if isinstance(term, Mapping):
            files += _terms((term.get("files", []),))
            paths += [str(p) for p in _terms((term.get("paths", []),))]
        else:
            files.append(term)
    files += _terms((kw.get("files", []),))
    paths += [str(p) for p in _terms((kw.get("paths", []),))]
    base = Path(str(variables.get("playbook_dir", ".")))
    for name in files:
        folders = [base / p for p in paths] if paths else [base]
        for folder in folders:
            path = folder / str(name)
            if controller_files.exists(path):
                return [str(path)]
    if kw.get("skip", False):
        return []
    raise LookupFailed("the 'first_found' lookup found none of the files: " + ", ".join(map(str, files)))


def search_path(variables: Mapping[str, Any]) -> list[Path]:
    """Ansible's ``ansible_search_path`` for a task: its role's folder first, then the playbook's."""
    role = variables.get("role_path")
    return ([Path(str(role))] if role else []) + [Path(str(variables.get("playbook_dir", ".")))]


def fileglob(variables: Mapping[str, Any], terms: list[Any], kw: dict[str, Any]) -> list[Any]:
    """Files (not folders) matching each pattern, as ansible-core 2.19's fileglob finds them:
    a bare pattern in the first of ``<path>/files`` and ``<path>`` (for each search path)
    where it matches; a pattern with a folder in that folder, found under ``files/`` or
    beside it. Sorted (Ansible gives the file system's order)."""
    found: list[str] = []
    for term in map(str, terms):
        folder, name = os.path.split(term)
        if Path(folder).is_absolute():
            folders = [Path(folder)]
        elif folder:
            folders = [p / sub / folder for p in search_path(variables) for sub in ("files", "")]
            folders = [next((f for f in folders if controller_files.is_dir(f)), folders[0])]
        else:
            folders = [p / sub for p in search_path(variables) for sub in ("files", "")]
        for where in folders:
            matches = sorted(g for g in glob.glob(str(where / name)) if controller_files.is_file(Path(g)))
            if matches:
                found += matches
                break
    return found


def _flattened(variables: Mapping[str, Any], terms: list[Any], kw: dict[str, Any]) -> list[Any]:
    """community.general's ``flattened`` (``with_flattened``): every nested list, all levels."""
    flat: list[Any] = []
    for term in terms:
        flat += _flattened(variables, list(term), kw) if isinstance(term, (list, tuple)) else [term]
    return flat


LOOKUPS: dict[str, Lookup] = {
    "env": _env,
    "file": _file,
    "pipe": _pipe,
    "vars": _vars,
    "first_found": _first_found,
    "fileglob": fileglob,
    "password": password,
    "flattened": _flattened,
}
# lookups that live in a collection, by the name rigger knows them by
COLLECTION_LOOKUPS = {"community.general.flattened": "flattened"}


def lookup_name(name: str) -> str:
    """The name in ``LOOKUPS`` a lookup is called by: builtin FQCNs and known collection ones mapped."""
    return COLLECTION_LOOKUPS.get(name, name.removeprefix("ansible.builtin.").removeprefix("ansible.legacy."))


def jinja_globals(lookups: Mapping[str, Lookup]) -> dict[str, Any]:
    """``lookup``, ``query`` and ``q`` over the given table of lookups (``LOOKUPS`` plus what
    the caller adds)."""

    def run(context: jinja2.runtime.Context, name: str, terms: tuple[Any, ...], kw: dict[str, Any]) -> list[Any]:
        short = lookup_name(name)
        if short not in lookups:
            raise LookupFailed(f"no lookup named {name!r} (rigger has: {', '.join(sorted(lookups))})")
        errors = kw.pop("errors", "strict")
        kw.pop("wantlist", None)
        try:
            return lookups[short](context.parent, _terms(terms), kw)
        except LookupFailed:
            if errors in ("ignore", "warn"):
                return []
            raise

    @jinja2.pass_context
    def lookup(context: jinja2.runtime.Context, name: str, *terms: Any, **kw: Any) -> Any:
        wantlist = bool(kw.get("wantlist", False))
        values = run(context, name, terms, kw)
        if wantlist or not values:
            return values
        if all(isinstance(v, str) for v in values):
            return ",".join(values)
        return values[0] if len(values) == 1 else values

    @jinja2.pass_context
    def query(context: jinja2.runtime.Context, name: str, *terms: Any, **kw: Any) -> list[Any]:
        return run(context, name, terms, kw)

    return {"lookup": lookup, "query": query, "q": query}

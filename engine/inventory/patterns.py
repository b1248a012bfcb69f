"""Ansible host patterns: ``web:db``, ``web:&prod``, ``web:!db``, globs, ``~regex``, subscripts.

As in ansible-core: terms are split on ``,`` (or on ``:`` outside brackets); plain terms
are applied first, then ``&`` intersections, then ``!`` exclusions, whatever order they
were written in (so ``!a:b`` means ``b`` without ``a``, and a pattern of exclusions only
starts from ``all``). ``group[0]``, ``group[1:]``, ``group[-1]`` pick from a group's hosts;
the end of ``[x:y]`` is inclusive. ``localhost`` matches the implicit localhost when the
inventory has no such host.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from pathlib import Path

from engine.errors import RiggerError, ValidationError
from engine.model import LOCALHOST_NAMES, Inventory

_SUBSCRIPT = re.compile(r"^(.+)\[(?:(-?[0-9]+)|([0-9]+)([:-])([0-9]*))\]\Z")
_COLON_TERMS = re.compile(r"(?:[^\s:\[\]]|\[[^\]]*\])+")
_IPV6 = re.compile(r"^[0-9a-fA-F:]+\Z")


class PatternError(RiggerError):
    """A pattern that cannot be evaluated: ansible-playbook stops with exit 1 (not 4)."""


def split_pattern(pattern: str) -> list[str]:
    if "," in pattern:
        terms = pattern.split(",")
    elif pattern.count(":") > 1 and _IPV6.match(pattern):
        terms = [pattern]
    else:
        terms = _COLON_TERMS.findall(pattern)
    return [t.strip() for t in terms if t.strip()]


def order_terms(terms: list[str]) -> list[str]:
    plain = [t for t in terms if t[0] not in "!&"]
    intersections = [t for t in terms if t[0] == "&"]
    exclusions = [t for t in terms if t[0] == "!"]
    return (plain or ["all"]) + intersections + exclusions


def _split_subscript(term: str) -> tuple[str, tuple[int, int | None] | None]:
    if term.startswith("~"):
        return term, None
    match = _SUBSCRIPT.match(term)
    if not match:
        return term, None
    expr, index, start, _sep, end = match.groups()
    if index is not None:
        return expr, (int(index), None)
    return expr, (int(start), int(end) if end else -1)


def _apply_subscript(hosts: list[str], subscript: tuple[int, int | None] | None, term: str) -> list[str]:
    if not hosts or subscript is None:
        return hosts
    start, end = subscript
    try:
        if end:
            return hosts[start : (len(hosts) - 1 if end == -1 else end) + 1]
        return [hosts[start]]
    except IndexError:
        raise PatternError(f"no hosts matched the subscripted pattern '{term}'") from None


def _matcher(expr: str) -> re.Pattern[str]:
    try:
        return re.compile(expr[1:]) if expr.startswith("~") else re.compile(fnmatch.translate(expr))
    except re.error as exc:
        raise PatternError(f"invalid host pattern '{expr}': {exc}") from None


def _enumerate(inventory: Inventory, expr: str) -> list[str]:
    matcher = _matcher(expr)
    groups = [g for g in inventory.groups if matcher.match(g)]
    found: dict[str, None] = {}
    for group in groups:
        found.update(dict.fromkeys(inventory.groups[group]))
    if not groups or expr.startswith("~") or any(ch in expr for ch in ".?*["):
        found.update(dict.fromkeys(h for h in inventory.hosts if matcher.match(h)))
    if not found and expr in LOCALHOST_NAMES and inventory.implicit_localhost is not None:
        found[expr] = None
    return list(found)


def match_term(inventory: Inventory, term: str) -> list[str]:
    """The hosts one term (without its ``!``/``&``) names, in inventory order."""
    expr, subscript = _split_subscript(term)
    return _apply_subscript(_enumerate(inventory, expr), subscript, term)


def _evaluate(inventory: Inventory, terms: list[str]) -> list[str]:
    hosts: list[str] = []
    for term in order_terms(terms):
        if term in inventory.hosts:
            hosts.append(term)
        elif term[0] == "!":
            excluded = set(match_term(inventory, term[1:]))
            hosts = [h for h in hosts if h not in excluded]
        elif term[0] == "&":
            kept = set(match_term(inventory, term[1:]))
            hosts = [h for h in hosts if h in kept]
        else:
            present = set(hosts)
            hosts += [h for h in match_term(inventory, term) if h not in present]
    return list(dict.fromkeys(hosts))


def _limit_terms(limit: str) -> list[str]:
    """``--limit`` terms; ``@file`` stands for the host names in that file, one a line."""
    terms: list[str] = []
    for term in split_pattern(limit):
        if not term.startswith("@"):
            terms.append(term)
            continue
        path = Path(term[1:])
        if not path.is_file():
            raise RiggerError(f"--limit {term}: unable to find limit file {path} (a file of host names)")
        terms += [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return terms


def select_hosts(inventory: Inventory, pattern: str, limit: str | None = None) -> list[str]:
    """The hosts ``pattern`` names, further restricted by ``limit`` (``--limit``)."""
    hosts = _evaluate(inventory, split_pattern(pattern))
    if limit:
        allowed = set(_evaluate(inventory, _limit_terms(limit)))
        hosts = [h for h in hosts if h in allowed]
    return hosts


def _names_anything(inventory: Inventory, term: str) -> bool:
    """ansible-core's test before its warning: the term names a group (even an empty one)
    or a host, or is ``all`` or the implicit localhost."""
    expr, _ = _split_subscript(term.lstrip("!&"))
    if expr in ("all", "*") or expr in inventory.hosts:
        return True
    matcher = _matcher(expr)
    if any(matcher.match(g) for g in inventory.groups) or any(matcher.match(h) for h in inventory.hosts):
        return True
    return expr in LOCALHOST_NAMES and inventory.implicit_localhost is not None


def mismatches(inventory: Inventory, pattern: str) -> list[str]:
    """ansible-core's warning for each term of a pattern that names nothing, with the
    inventory name it most likely meant: ``hosts: gpu`` when the group is ``gpus``."""
    found = []
    for term in split_pattern(pattern):
        if _names_anything(inventory, term):
            continue
        term = term.lstrip("!&")  # ansible-core names the term without its operator
        names = sorted({*inventory.groups, *inventory.hosts} - {"all", "ungrouped"})
        close = difflib.get_close_matches(term, names, n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        found.append(f"Could not match supplied host pattern, ignoring: {term}{hint}")
    return found


def limit_warnings(inventory: Inventory, limit: str | None) -> list[str]:
    """The warnings for ``--limit`` terms that name nothing (an empty inventory: none)."""
    if not limit or not inventory.hosts:
        return []
    return mismatches(inventory, ",".join(t for t in split_pattern(limit) if not t.startswith("@")))


def targeted_connections(inventory: Inventory, patterns: list[str], limit: str | None = None) -> list[str]:
    """Refuse a host a play targets whose ``ansible_connection`` rigger lacks (the error says
    where it was written); warn of the others, which no play reaches. Ansible, too, fails
    only when it connects to such a host. A templated pattern is judged when the run renders
    it (the connection refuses the host then)."""
    if not inventory.unusable:
        return []
    targeted: set[str] = set()
    for pattern in patterns:
        if "{{" in pattern or "{%" in pattern:
            continue
        try:
            targeted.update(select_hosts(inventory, pattern, limit))
        except PatternError:
            continue  # the run reports a pattern it cannot evaluate, as ansible-playbook does
    for name, problem in inventory.unusable.items():
        if name in targeted:
            raise ValidationError(
                f"{problem.message} (host {name}, which a play targets)", file=problem.file, line=problem.line
            )
    return [f"{problem.located()} (host {name}; no play targets it)" for name, problem in inventory.unusable.items()]


def require_limit_matches(inventory: Inventory, limit: str | None) -> None:
    """``--limit`` leaving no inventory host is an error, as in ansible-playbook (exit 1,
    its wording, after its warning with "did you mean"); with an empty inventory nothing
    is targeted and that is no error. The one check run, plan and apply make."""
    if limit and inventory.hosts and not select_hosts(inventory, "all", limit):
        warned = "".join(f"\n[WARNING] {w}" for w in limit_warnings(inventory, limit))
        raise RiggerError(
            f"--limit {limit!r}: the inventory, host pattern and --limit leave no hosts to target{warned}"
        )

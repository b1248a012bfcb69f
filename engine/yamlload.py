"""Safe YAML loading that remembers where every key came from.

Bounds are checked before the composer runs: the file's size, UTF-8, the nesting depth
(counted on the token stream, which is not recursive) and, after composing but before
constructing, the size the document would have once aliases are expanded (alias bombs).
Duplicate keys are errors, not silent overrides.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from engine.errors import ValidationError

MAX_BYTES = 4 * 2**20
MAX_DEPTH = 64
MAX_EXPANDED_NODES = 200_000
_OPENERS = (
    yaml.BlockMappingStartToken,
    yaml.BlockSequenceStartToken,
    yaml.FlowMappingStartToken,
    yaml.FlowSequenceStartToken,
)
_CLOSERS = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


class LocatedDict(dict[str, Any]):
    """A mapping from YAML that knows its file, its line and each key's line."""

    file: str = ""
    line: int = 0
    key_lines: dict[Any, int]
    raw_scalars: dict[Any, str]

    def line_of(self, key: Any) -> int:
        return self.key_lines.get(key, self.line) if hasattr(self, "key_lines") else self.line


class LocatedList(list[Any]):
    file: str = ""
    line: int = 0
    item_lines: list[int]

    def line_of(self, index: int) -> int:
        lines = getattr(self, "item_lines", [])
        return lines[index] if isinstance(index, int) and 0 <= index < len(lines) else self.line


class _Loader(yaml.SafeLoader):
    source_name = ""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LocatedDict:
    """Build a LocatedDict. Two explicit equal keys are an error; a key merged in through
    ``<<:`` is overridden by an explicit one, as YAML and Ansible intend."""
    explicit = {id(key) for key, _ in node.value if key.tag != "tag:yaml.org,2002:merge"}
    loader.flatten_mapping(node)
    mapping = LocatedDict()
    mapping.file = loader.source_name
    mapping.line = node.start_mark.line + 1
    mapping.key_lines = {}
    mapping.raw_scalars = {}
    explicit_keys: set[Any] = set()
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            hash(key)
        except TypeError:
            raise ValidationError(
                "a mapping key must be a plain value (a value that starts with '{{' must be quoted: msg: \"{{ x }}\")",
                file=mapping.file,
                line=line,
            ) from None
        is_explicit = id(key_node) in explicit
        if is_explicit and key in explicit_keys:
            raise ValidationError(
                f"duplicate key {key!r} (first defined on line {mapping.key_lines[key]})",
                file=mapping.file,
                line=line,
            )
        if not is_explicit and key in explicit_keys:
            continue  # merged pairs come first in PyYAML's order; an explicit key wins
        if is_explicit:
            explicit_keys.add(key)
        mapping.key_lines[key] = line
        mapping[key] = loader.construct_object(value_node, deep=True)
        if isinstance(value_node, yaml.ScalarNode) and value_node.style is None:
            mapping.raw_scalars[key] = value_node.value
    return mapping


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> LocatedList:
    items = LocatedList(loader.construct_object(child, deep=True) for child in node.value)
    items.file = loader.source_name
    items.line = node.start_mark.line + 1
    items.item_lines = [child.start_mark.line + 1 for child in node.value]
    return items


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_sequence)


def _check_depth(text: str, name: str) -> None:
    depth = 0
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, _OPENERS):
            depth += 1
            if depth > MAX_DEPTH:
                raise ValidationError(
                    f"nested more than {MAX_DEPTH} levels deep", file=name, line=token.start_mark.line + 1
                )
        elif isinstance(token, _CLOSERS):
            depth -= 1


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = 1  # guards against recursive aliases
    children: Iterator[yaml.Node]
    if isinstance(node, yaml.MappingNode):
        children = (part for pair in node.value for part in pair)
    elif isinstance(node, yaml.SequenceNode):
        children = iter(node.value)
    else:
        children = iter(())
    total = 1 + sum(_expanded_size(child, memo) for child in children)
    memo[key] = total
    return total


def decode(data: bytes, name: str) -> str:
    if len(data) > MAX_BYTES:
        raise ValidationError(f"file is larger than the limit of {MAX_BYTES} bytes", file=name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ValidationError(f"not valid UTF-8 (byte {exc.start})", file=name, line=line) from None


def load_text(text: str, name: str) -> Any:
    """Parse one YAML document with locations; raise ValidationError on any problem."""
    try:
        _check_depth(text, name)
        loader = _Loader(text)
        loader.source_name = name
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            if _expanded_size(node, {}) > MAX_EXPANDED_NODES:
                raise ValidationError(
                    f"expands to more than {MAX_EXPANDED_NODES} nodes through aliases (an alias bomb?)",
                    file=name,
                    line=node.start_mark.line + 1,
                )
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        raise _explained(exc, name) from None
    except yaml.YAMLError as exc:
        raise ValidationError(f"invalid YAML: {exc}", file=name) from None
    except RecursionError:
        raise ValidationError("nested too deeply", file=name) from None


def _explained(exc: yaml.MarkedYAMLError, name: str) -> ValidationError:
    """PyYAML's error in plain words, at the line of the mistake: the parser notices an
    unclosed bracket or quote only on a later line (or at the end of the file), so those
    point where the bracket or quote opened."""
    start, found = exc.context_mark, exc.problem_mark
    context, problem = exc.context or "", exc.problem or ""
    at = found or start
    line = at.line + 1 if at else None
    later = f" (YAML noticed at line {found.line + 1})" if found and start and found.line != start.line else ""
    if start is not None and context.startswith("while parsing a flow "):
        opener, closer, kind = ("[", "]", "list") if "sequence" in context else ("{", "}", "mapping")
        return ValidationError(
            f"invalid YAML: the {kind} '{opener}' opened on this line is never closed with '{closer}'{later}."
            f" Close it, or quote the whole value if the brackets are text (a value starting with"
            f" '{{{{' must be quoted: msg: \"{{{{ x }}}}\")",
            file=name,
            line=start.line + 1,
        )
    if start is not None and "quoted scalar" in context:
        return ValidationError(
            f"invalid YAML: the quote opened on this line is never closed{later}. Add the closing quote",
            file=name,
            line=start.line + 1,
        )
    if start is not None and "could not find expected ':'" in problem:
        return ValidationError(
            f"invalid YAML: a key without its ':'{later}. Write 'key: value' (or '- item' in a list)",
            file=name,
            line=start.line + 1,
        )
    if "mapping values are not allowed" in problem and _continues_a_bare_word(found):
        return ValidationError(
            "invalid YAML: a key without its ':' (YAML read the next line as more of it)."
            " Write 'key: value' (or '- item' in a list)",
            file=name,
            line=line - 1 if line else None,
        )
    if "mapping values are not allowed" in problem:
        message = (
            "invalid YAML: a ':' YAML cannot take here. A value that contains ': ' must be quoted"
            ' (msg: "a: b"); a key on its own line must be indented like the keys beside it, not more'
        )
        return ValidationError(message, file=name, line=line)
    if "expected <block end>" in problem:
        where = f" (the block it belongs to starts at line {start.line + 1})" if start is not None else ""
        return ValidationError(
            f"invalid YAML: this line is indented differently from the lines before it{where}."
            " Indent it with spaces like the keys or '- ' items it goes with",
            file=name,
            line=line,
        )
    if "'\\t'" in problem:
        return ValidationError("invalid YAML: a tab character: YAML indents with spaces only", file=name, line=line)
    words = " ".join(part for part in (context, problem) if part)
    return ValidationError(f"invalid YAML: {words}", file=name, line=line)


def _continues_a_bare_word(found: Any) -> bool:
    """Whether the line before ``found`` is a bare word, a key that lost its ':' (``tasks``
    above an indented ``- item``): YAML then reads both lines as one value."""
    buffer = getattr(found, "buffer", None)
    if not isinstance(buffer, str) or found.line == 0:
        return False
    before = buffer.split("\n")[found.line - 1].strip()
    return bool(before) and ":" not in before and not before.startswith(("-", "#", '"', "'"))


def read_bounded(path: str | Path) -> bytes:
    """A regular file's bytes, at most MAX_BYTES + 1 of them (decode() names the excess).

    Opened without blocking and checked with fstat before any read: a FIFO, a device such
    as /dev/zero or a directory is refused by name instead of read until memory runs out.
    """
    name = str(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ValidationError("file not found", file=name) from None
    except OSError as exc:
        raise ValidationError(f"cannot read: {exc.strerror}", file=name) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ValidationError("is a directory, not a file", file=name)
        if not stat.S_ISREG(mode):
            raise ValidationError("not a regular file (a device, FIFO or socket is never read)", file=name)
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ValidationError(f"cannot read: {exc.strerror}", file=name) from None
    finally:
        os.close(fd)


_READS: dict[str, bytes] = {}
_READS_LOCK = threading.Lock()


def read_recorded(path: str | Path) -> bytes:
    """Read a playbook, inventory or vars file (bounded, as ``read_bounded``) and remember it:
    a saved plan hashes every file that went into it (engine/plans), includes and roles too."""
    data = read_bounded(path)
    with _READS_LOCK:
        _READS[str(Path(path).resolve())] = data
    return data


def files_read() -> dict[str, bytes]:
    """Every file read through ``read_recorded`` in this process: resolved path -> bytes."""
    with _READS_LOCK:
        return dict(_READS)


def load_file(path: str | Path) -> Any:
    name = str(path)
    return load_text(decode(read_recorded(path), name), name)


def line_of(container: Any, key: Any) -> int | None:
    if isinstance(container, (LocatedDict, LocatedList)):
        return container.line_of(key)
    return None

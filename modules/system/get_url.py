"""Download a file over HTTP(S) or FTP from the host to a path on the host, checked by checksum.

Ansible's `get_url`: the request is made from the host. An existing `dest` is kept
without a request when `checksum` (`sha256:HEX`, or `sha256:URL` of a checksums file
naming the URL's file) matches it and `force` is false; without a checksum a conditional
GET (If-Modified-Since the file's mtime) is made, and a file the server says is not
modified (304), or whose content is what `dest` holds, is left alone. A new body is
verified against `checksum` before anything is written, then written atomically through
the file primitive with `mode` (and a `backup` copy). A directory `dest` takes the file
name the server gives (Content-Disposition) or the URL's last part. Check mode plans a
download whenever `dest` is missing, forced, or not proven by a checksum (Ansible's check
mode sends a HEAD and reports a change in those cases too); nothing is fetched then but a
checksums file. The
body is held in memory up to `max_bytes` (default 8 GiB) before the one atomic write.
`url_password` never reaches output or plan files. Arguments rigger does not act on
(`owner`, `group`, `tmp_dest`, `client_cert`, `ciphers`, ...) are refused by name.
"""

from __future__ import annotations

import base64
import posixpath
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Diff, Result, TaskContext, TaskFailed, Unchanged

HOST_PATHS = ("dest",)
ALGORITHMS = ("md5", "sha1", "sha224", "sha256", "sha384", "sha512")
MAX_BYTES = 8 << 30
_CHECKSUMS_FILE_BYTES = 16 << 20
_MODE = re.compile(r"^0?[0-7]{3,4}\Z")

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["url", "dest"],
    "properties": {
        "url": {"type": "string", "description": "http://, https:// or ftp:// URL to download."},
        "dest": {"type": "string", "description": "The file to write (or a directory to write it in)."},
        "checksum": {
            "type": "string",
            "default": "",
            "description": "`ALGORITHM:HEX`, or `ALGORITHM:URL` of a checksums file (`HEX  NAME` lines).",
        },
        "force": {
            "type": "boolean",
            "default": False,
            "description": "Download even when dest exists and its checksum matches.",
        },
        "mode": {
            "type": ["string", "integer"],
            "description": "Permission bits of the file (octal `0644`); an existing file's are kept without it.",
        },
        "backup": {"type": "boolean", "default": False, "description": "Keep a timestamped copy of the file replaced."},
        "timeout": {"type": "integer", "default": 10, "description": "Seconds for the request."},
        "headers": {"type": "object", "description": "Request headers (name: value)."},
        "url_username": {"type": "string", "description": "User for HTTP basic authentication."},
        "username": {"type": "string", "description": "Another name for url_username (Ansible's alias)."},
        "url_password": {"type": "string", "description": "Password for HTTP basic authentication (never shown)."},
        "password": {"type": "string", "description": "Another name for url_password (Ansible's alias)."},
        "force_basic_auth": {
            "type": "boolean",
            "default": False,
            "description": "Send the credentials with the first request instead of after a 401.",
        },
        "validate_certs": {"type": "boolean", "default": True, "description": "Verify the server's TLS certificate."},
        "use_proxy": {"type": "boolean", "default": True, "description": "Use the proxy the environment names."},
        "http_agent": {"type": "string", "default": "ansible-httpget", "description": "User-Agent header."},
        "max_bytes": {
            "type": "integer",
            "minimum": 1,
            "default": MAX_BYTES,
            "description": "rigger's own: the largest body accepted (it is held in memory before the write).",
        },
    },
}


def _parse_checksum(text: str) -> tuple[str, str] | None:
    if not text:
        return None
    algorithm, sep, value = text.partition(":")
    if not sep:
        raise TaskFailed("The checksum parameter has to be in format <algorithm>:<checksum>")
    if algorithm not in ALGORITHMS:
        raise TaskFailed(f"unsupported checksum algorithm {algorithm!r} (one of {', '.join(ALGORITHMS)})")
    return algorithm, value


def _hex(value: str) -> str:
    digest = re.sub(r"\W+", "", value).lower()
    if not re.fullmatch(r"[0-9a-f]+", digest):
        raise TaskFailed("The checksum format is invalid")
    return digest


def _url_filename(url: str) -> str:
    return posixpath.basename(urllib.parse.urlsplit(url).path) or "index.html"


def _request(args: Mapping[str, Any], url: str, **extra: Any) -> dict[str, Any]:
    """The probe's arguments: credentials travel on the probe's stdin, never in a plan."""
    headers = {"User-Agent": args["http_agent"], **{str(k): str(v) for k, v in (args.get("headers") or {}).items()}}
    return {
        "url": url,
        "method": "GET",
        "headers": headers,
        "timeout": args["timeout"],
        "validate_certs": args["validate_certs"],
        "use_proxy": args["use_proxy"],
        "follow_redirects": "safe",
        "username": args.get("url_username") or args.get("username"),
        "password": args.get("url_password") or args.get("password"),
        "force_basic_auth": args["force_basic_auth"],
        "max_bytes": args["max_bytes"],
        **extra,
    }


def _digest_from_url(ctx: TaskContext, args: Mapping[str, Any], url: str) -> str:
    """A checksums file (sha256sum's `HEX  NAME` lines, or a bare digest) fetched from the host."""
    answer = ctx.conn.run_probe("http_get", _request(args, url, max_bytes=_CHECKSUMS_FILE_BYTES))
    if answer["error"] or answer["status"] != 200:
        raise TaskFailed(f"cannot fetch the checksums file {url}: {answer['msg']}")
    lines = base64.b64decode(answer["body"]).decode("utf-8", "replace").splitlines()
    filename = _url_filename(args["url"])
    for line in lines:
        parts = line.split()
        if len(parts) == 1 and len(lines) == 1:
            return parts[0]
        if len(parts) == 2 and parts[1].lstrip("*").lstrip("./") == filename:
            return parts[0]
    raise TaskFailed(f"Unable to find a checksum for file '{filename}' in '{url}'")


def _mode(args: Mapping[str, Any]) -> int | None:
    mode = args.get("mode")
    if mode is None:
        return None
    text = f"{mode:o}" if isinstance(mode, int) else str(mode)
    if not _MODE.match(text):
        raise TaskFailed(f"mode: {mode!r} is not an octal mode (symbolic modes are not supported by get_url here)")
    return int(text, 8)


def _dest_facts(ctx: TaskContext, dest: str, algorithm: str) -> dict[str, Any]:
    facts: dict[str, Any] = ctx.conn.run_probe("file_facts", {"paths": [dest], "checksum": algorithm})["paths"][dest]
    return facts


def _is_url(value: str) -> bool:
    return value.startswith(("http://", "https://", "ftp://"))


def _expected(ctx: TaskContext, args: Mapping[str, Any]) -> tuple[str, str] | None:
    """(algorithm, hex digest) the body must have; a checksums file is fetched for it, in
    check mode too, as Ansible fetches it."""
    checksum = _parse_checksum(args["checksum"])
    if checksum is None:
        return None
    algorithm, value = checksum
    return algorithm, _hex(_digest_from_url(ctx, args, value) if _is_url(value) else value)


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    expected = _expected(ctx, args)
    mode = _mode(args)
    dest = args["dest"]
    facts = _dest_facts(ctx, dest, expected[0] if expected else "sha1")
    if facts.get("type") == "directory":
        dest = posixpath.join(dest, _url_filename(args["url"]))
        facts = _dest_facts(ctx, dest, expected[0] if expected else "sha1")
    data = {"dest": dest, "url": _masked(args["url"])}
    payload: dict[str, Any] = {"dest": dest, "checksum": list(expected) if expected else None}
    if expected and facts.get("exists") and not args["force"] and facts.get("checksum") == expected[1]:
        if mode is None or int(facts["mode"], 8) == mode:
            return Unchanged("file already exists", {**data, "checksum_dest": facts.get("checksum")})
        diff = Diff(f"{dest} (mode)", f"{facts['mode']}\n", f"{mode:04o}\n")
        return Change("file already exists but file attributes changed", (diff,), {**payload, "download": False})
    existed = bool(facts.get("exists"))
    diff = Diff(dest, "(present: its content may change)\n" if existed else "", f"(downloaded from {data['url']})\n")
    fingerprint = {f"file:{dest}": f"{facts.get('checksum') or ''}" if existed else "absent"}
    return Change(f"download {data['url']} to {dest}", (diff,), {**payload, "download": True}, fingerprint)


def _masked(url: str) -> str:
    """The URL without a password in it (Ansible's mask_url)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":********@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    dest, mode = change.payload["dest"], _mode(args)
    if not change.payload["download"]:
        ctx.conn.run_probe("fileio", {"op": "attrs", "path": dest, "mode": mode})
        return Result(True, change.summary, diffs=change.diffs, data={"dest": dest, "url": _masked(args["url"])})
    expected = change.payload["checksum"]
    facts = _dest_facts(ctx, dest, "sha1")
    since = facts["mtime"] if facts.get("exists") and not args["force"] and not expected else None
    request = _request(
        args,
        args["url"],
        dest=dest,
        mode=mode,
        backup=args["backup"],
        checksum=expected,
        dest_checksum=facts.get("checksum"),
        if_modified_since=since,
    )
    answer = ctx.conn.run_probe("http_request", request)
    data = {
        "dest": dest,
        "url": _masked(args["url"]),
        "status_code": answer["status"],
        "msg": answer["msg"],
        "checksum_src": answer.get("checksum_src"),
        "checksum_dest": facts.get("checksum"),
        "elapsed": answer.get("elapsed", 0),
        "size": answer.get("size"),
        "backup_file": answer.get("backup_file"),
    }
    if answer["status"] == 304:
        return Result(False, answer["msg"], data=data)
    if answer["error"] or answer["status"] != 200:
        raise TaskFailed(f"Request failed: {answer['msg']}", data)
    return Result(
        answer["written"], change.summary if answer["written"] else "file already exists", diffs=change.diffs, data=data
    )

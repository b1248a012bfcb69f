"""Make an HTTP(S) request from the host and check its answer (status, JSON body); a web API call.

Ansible's `uri`: the request is made from the host, with `method`, `headers`, `body`
(`body_format` json or form-urlencoded encodes a mapping), basic authentication
(`url_username`/`url_password`, `force_basic_auth`) and redirects (`follow_redirects`:
safe follows GET and HEAD only). The task fails unless the status is in `status_code`
(Ansible's message). The result has Ansible's keys: `status`, `url`, `redirected`, `msg`,
`elapsed`, each response header (lowercased, `-` as `_`), `content` with
`return_content` (or on a failure), `json` for a JSON answer, and `path` when `dest` kept
the body (written through the file primitive; the only change this module reports).
`creates`/`removes` skip the request as in Ansible. Like Ansible's, it does not run in
check mode: the request may change the server it calls. `url_password` and request
headers never reach output or plan files. `src`, `unix_socket`, `form-multipart`,
`client_cert` and the like are refused by name.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Result, TaskContext, TaskFailed, Unchanged

CHECK_MODE = "skip"
HOST_PATHS = ("dest", "creates", "removes")
MAX_BYTES = 64 << 20
_JSON_TYPES = ("json", "javascript")

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["url"],
    "properties": {
        "url": {"type": "string", "description": "http:// or https:// URL to call."},
        "method": {"type": "string", "default": "GET", "description": "The HTTP method, one uppercase word."},
        "body": {"description": "The request body (a mapping with body_format json or form-urlencoded)."},
        "body_format": {
            "type": "string",
            "enum": ["raw", "json", "form-urlencoded"],
            "default": "raw",
            "description": "How to encode body; json and form-urlencoded set Content-Type unless headers do.",
        },
        "headers": {"type": "object", "default": {}, "description": "Request headers (name: value)."},
        "status_code": {
            "type": ["array", "integer", "string"],
            "items": {"type": ["integer", "string"]},
            "default": [200],
            "description": "The statuses that mean success.",
        },
        "return_content": {"type": "boolean", "default": False, "description": "Return the body as `content`."},
        "dest": {"type": "string", "description": "Write the body to this file on the host."},
        "creates": {"type": "string", "description": "Skip the request when this path exists."},
        "removes": {"type": "string", "description": "Skip the request unless this path exists."},
        "timeout": {"type": "integer", "default": 30, "description": "Seconds for the request."},
        "follow_redirects": {
            "type": "string",
            "enum": ["all", "no", "none", "safe", "urllib2", "yes"],
            "default": "safe",
            "description": "safe: redirects of GET and HEAD only; all/yes/urllib2: every one; none/no: none.",
        },
        "url_username": {"type": "string", "description": "User for HTTP basic authentication."},
        "user": {"type": "string", "description": "Another name for url_username (Ansible's alias)."},
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
    },
}


def _statuses(value: Any) -> list[int]:
    items = value if isinstance(value, list) else str(value).split(",")
    try:
        return [int(str(item).strip()) for item in items]
    except ValueError:
        raise TaskFailed(f"status_code: {value!r} is not a list of HTTP statuses") from None


def _body(args: Mapping[str, Any], headers: dict[str, str]) -> bytes | None:
    body, kind = args.get("body"), args["body_format"]
    has_type = any(name.lower() == "content-type" for name in headers)
    if kind == "json":
        body = body if isinstance(body, str) else json.dumps(body)
        if not has_type:
            headers["Content-Type"] = "application/json"
    elif kind == "form-urlencoded":
        if not isinstance(body, str):
            pairs = body.items() if isinstance(body, Mapping) else body or []
            body = urllib.parse.urlencode(list(pairs))
        if not has_type:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
    if body is None:
        return None
    return body.encode() if isinstance(body, str) else str(body).encode()


def _masked(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":********@", 1)))


def _exists(ctx: TaskContext, path: str) -> bool:
    return bool(ctx.conn.run_probe("file_facts", {"paths": [path]})["paths"][path]["exists"])


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    method = args["method"].upper()
    if not re.fullmatch(r"[A-Z]+", method):
        raise TaskFailed("Parameter 'method' needs to be a single word in uppercase, like GET or POST.")
    _statuses(args["status_code"])
    if args.get("creates") and _exists(ctx, args["creates"]):
        return Unchanged(
            f"skipped, since '{args['creates']}' exists", {"stdout": f"skipped, since '{args['creates']}' exists"}
        )
    if args.get("removes") and not _exists(ctx, args["removes"]):
        message = f"skipped, since '{args['removes']}' does not exist"
        return Unchanged(message, {"stdout": message})
    return Change(f"{method} {_masked(args['url'])}", payload={"method": method})


def _result(args: Mapping[str, Any], answer: Mapping[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {key.replace("-", "_").lower(): value for key, value in answer["headers"].items()}
    data |= {
        "status": answer["status"],
        "url": answer["url"],
        "redirected": answer["url"] != args["url"],
        "msg": answer["msg"],
        "elapsed": answer.get("elapsed", 0),
        "changed": bool(answer.get("written")),
    }
    raw = base64.b64decode(answer.get("body") or "")
    content_type = str(answer["headers"].get("content-type", "")).split(";")[0].strip().lower()
    if args["return_content"] or answer["status"] not in _statuses(args["status_code"]):
        data["content"] = raw.decode("utf-8", "replace")
    if raw and any(kind in content_type.rpartition("/")[2] for kind in _JSON_TYPES):
        with contextlib.suppress(ValueError):
            data["json"] = json.loads(raw)
    if args.get("dest"):
        data["path"] = args["dest"]
    return data


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    headers = {"User-Agent": args["http_agent"], **{str(k): str(v) for k, v in args["headers"].items()}}
    body = _body(args, headers)
    statuses = _statuses(args["status_code"])
    redirects = {"all": "all", "yes": "all", "urllib2": "all", "safe": "safe"}.get(args["follow_redirects"], "none")
    request = {
        "url": args["url"],
        "method": change.payload["method"],
        "headers": headers,
        "body": None if body is None else base64.b64encode(body).decode(),
        "timeout": args["timeout"],
        "validate_certs": args["validate_certs"],
        "use_proxy": args["use_proxy"],
        "follow_redirects": redirects,
        "username": args.get("url_username") or args.get("user"),
        "password": args.get("url_password") or args.get("password"),
        "force_basic_auth": args["force_basic_auth"],
        "max_bytes": MAX_BYTES,
        "keep_body": True,
        "dest": args.get("dest"),
        "write_statuses": [s for s in statuses if s != 304],
    }
    answer = ctx.conn.run_probe("http_request", request)
    data = _result(args, answer)
    data["url"] = _masked(data["url"])
    if answer["error"]:
        raise TaskFailed(f"Status code was -1 and not {statuses}: {answer['msg']}", data)
    if answer["status"] not in statuses:
        raise TaskFailed(f"Status code was {answer['status']} and not {statuses}: {answer['msg']}", data)
    return Result(changed=data["changed"], msg=f"{answer['status']} from {data['url']}", data=data)

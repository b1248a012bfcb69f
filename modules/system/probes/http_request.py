"""One HTTP(S) request from the host (get_url, uri), its body optionally written to a file.

Args: ``url``, ``method``, ``headers``, ``body`` (base64 or None), ``timeout``,
``validate_certs``, ``follow_redirects`` (none, safe: GET/HEAD only, all), ``username`` /
``password`` (basic auth, sent at once with ``force_basic_auth``, else on a 401
challenge; never echoed back), ``use_proxy``, ``if_modified_since`` (epoch seconds),
``max_bytes``, ``keep_body`` (return it, at most ``max_bytes``), and ``dest`` to write the
body there through the file primitive (``mode``, ``backup``) when it differs from what is
there, after ``checksum`` (``[algorithm, hex]``) is verified; ``dest_checksum`` the
caller's digest of the file there now (sha1) to compare with.
Answer: ``status``, ``url`` (final, after redirects), ``headers`` (names lowercased),
``msg``, ``body`` (base64) when asked, ``checksum_src`` (sha1), ``size``, ``written``,
``backup_file``, ``error`` (no answer at all: why).
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import os
import ssl
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

MUTATES = True
USES = ("fileio",)
_BLOCK = 1 << 20


class _Redirects(urllib.request.HTTPRedirectHandler):
    def __init__(self, policy: str) -> None:
        self.policy = policy

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        if self.policy == "none" or (self.policy == "safe" and req.get_method() not in ("GET", "HEAD")):
            return None
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener(args: dict[str, Any]) -> urllib.request.OpenerDirector:
    context = ssl.create_default_context()
    if not args.get("validate_certs", True):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    handlers: list[Any] = [
        urllib.request.HTTPSHandler(context=context),
        _Redirects(args.get("follow_redirects", "safe")),
    ]
    if not args.get("use_proxy", True):
        handlers.append(urllib.request.ProxyHandler({}))
    if args.get("username") and not args.get("force_basic_auth"):
        passwords = urllib.request.HTTPPasswordMgrWithDefaultRealm()
        passwords.add_password(None, args["url"], args["username"], args.get("password") or "")
        handlers.append(urllib.request.HTTPBasicAuthHandler(passwords))
    return urllib.request.build_opener(*handlers)


def _request(args: dict[str, Any]) -> urllib.request.Request:
    headers = dict(args.get("headers") or {})
    if args.get("username") and args.get("force_basic_auth"):
        token = f"{args['username']}:{args.get('password') or ''}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(token).decode()
    if args.get("if_modified_since") is not None:
        headers["If-Modified-Since"] = email.utils.formatdate(args["if_modified_since"], usegmt=True)
    body = None if args.get("body") is None else base64.b64decode(args["body"])
    return urllib.request.Request(args["url"], data=body, headers=headers, method=args.get("method", "GET"))


def _read(response: Any, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        block = response.read(_BLOCK)
        if not block:
            return b"".join(chunks)
        size += len(block)
        if size > limit:
            raise OSError(f"the response is larger than {limit} bytes, the most rigger holds for one request")
        chunks.append(block)


def _write(args: dict[str, Any], data: bytes, answer: dict[str, Any]) -> None:
    checksum = args.get("checksum")
    if checksum:
        got = hashlib.new(checksum[0], data).hexdigest()
        if got != checksum[1]:
            raise ValueError(f"The checksum for {args['url']} did not match {checksum[1]}; it was {got}.")
    if answer["checksum_src"] == args.get("dest_checksum"):
        return
    if args.get("backup") and args.get("dest_checksum"):
        # Ansible's backup_local name: FILE.PID.TIMESTAMP~
        backup = f"{args['dest']}.{os.getpid()}.{time.strftime('%Y-%m-%d@%H:%M:%S')}~"
        answer["backup_file"] = call("fileio", {"op": "backup", "path": args["dest"], "backup": backup})["backup"]
    encoded = base64.b64encode(data).decode()
    call("fileio", {"op": "write", "path": args["dest"], "data": encoded, "mode": args.get("mode")})
    answer["written"] = True


def main(args: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    answer: dict[str, Any] = {"written": False, "backup_file": None, "error": None}
    try:
        response = _opener(args).open(_request(args), timeout=float(args.get("timeout", 30)))
    except urllib.error.HTTPError as exc:
        response = exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return answer | {
            "status": -1,
            "url": args["url"],
            "headers": {},
            "msg": f"Request failed: {reason}",
            "error": str(reason),
        }
    with response:
        data = _read(response, int(args["max_bytes"])) if response.fp is not None else b""
        status = response.status if hasattr(response, "status") else response.code
        answer |= {
            "status": status,
            "url": response.geturl(),
            "headers": {name.lower(): value for name, value in response.headers.items()},
            "msg": f"OK ({len(data)} bytes)" if status < 400 else f"HTTP Error {status}: {response.reason}",
            "size": len(data),
            "checksum_src": hashlib.sha1(data).hexdigest(),
        }
    if args.get("keep_body"):
        answer["body"] = base64.b64encode(data).decode()
    if args.get("dest") and status in args.get("write_statuses", [200]):
        _write(args, data, answer)
    answer["elapsed"] = int(time.monotonic() - started)
    return answer

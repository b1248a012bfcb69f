"""One HTTP request from the host itself (so readiness works over SSH): stdlib urllib only.

Args: ``url``, ``method`` (GET), ``json`` (a body to send as JSON), ``api_key`` (sent as a
bearer token; never echoed back), ``timeout_s``. Answer: ``status`` (HTTP status, or None
when no answer), ``body`` (text, at most 64 KiB), ``error`` (why there was no answer).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

MAX_BODY = 65536


def main(args: dict[str, Any]) -> dict[str, Any]:
    data = None
    headers = {"Accept": "application/json"}
    if args.get("json") is not None:
        data = json.dumps(args["json"]).encode()
        headers["Content-Type"] = "application/json"
    if args.get("api_key"):
        headers["Authorization"] = "Bearer " + args["api_key"]
    request = urllib.request.Request(args["url"], data=data, headers=headers, method=args.get("method", "GET"))
    try:
        with urllib.request.urlopen(request, timeout=float(args.get("timeout_s", 5))) as response:
            body = response.read(MAX_BODY).decode("utf-8", "replace")
            return {"status": response.status, "body": body, "error": None}
    except urllib.error.HTTPError as exc:
        body = exc.read(MAX_BODY).decode("utf-8", "replace") if exc.fp else ""
        return {"status": exc.code, "body": body, "error": None}
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return {"status": None, "body": "", "error": f"{type(exc).__name__}: {reason}"}

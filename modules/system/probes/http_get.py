"""Read-only: one GET from the host, its body returned (a key list, a checksums file).

The request of ``http_request`` with the method forced to GET and nothing written on the
host, so a module may ask it while planning. Args and answer as ``http_request``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("http_request",)


def main(args: dict[str, Any]) -> dict[str, Any]:
    request = {key: value for key, value in args.items() if key not in ("dest", "body", "method")}
    answer: dict[str, Any] = call("http_request", {**request, "method": "GET", "keep_body": True})
    return answer

"""Ansible's ping, on the host: the Python that runs probes there answers with ``data``."""

from __future__ import annotations

from typing import Any


def main(args: dict[str, Any]) -> dict[str, Any]:
    return {"ping": args["data"]}

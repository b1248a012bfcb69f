"""The distributions installed in a virtualenv, read from their metadata files (nothing imported).

Optionally returns the text of small files under site-packages (``read``), e.g.
``torch/version.py``, so callers learn build details without importing anything.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any


def _field(text: str, name: str) -> str | None:
    match = re.search(r"^" + name + r":\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else None


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _site_packages(venv: str) -> list[str]:
    """The venv's site-packages, then directories its .pth files add (what pip counts too)."""
    sites = sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages")))
    added: list[str] = []
    for site in sites:
        for pth in sorted(glob.glob(os.path.join(site, "*.pth"))):
            with open(pth, encoding="utf-8", errors="replace") as handle:
                for line in handle.read().splitlines():
                    path = os.path.join(site, line.strip())
                    if line.strip() and not line.startswith(("#", "import")) and os.path.isdir(path):
                        added.append(os.path.normpath(path))
    return sites + [a for a in added if a not in sites]


def main(args: dict[str, Any]) -> dict[str, Any]:
    venv = args["venv"]
    python = os.path.join(venv, "bin", "python")
    answer: dict[str, Any] = {
        "exists": os.path.exists(python),
        "python": python,
        "dists": {},
        "files": {},
        "site_packages": None,
    }
    for site in reversed(_site_packages(venv)):  # the venv's own entries win
        answer["site_packages"] = site
        for meta in glob.glob(os.path.join(site, "*.dist-info", "METADATA")) + glob.glob(
            os.path.join(site, "*.egg-info", "PKG-INFO")
        ):
            with open(meta, encoding="utf-8", errors="replace") as handle:
                head = handle.read(4096)
            name, version = _field(head, "Name"), _field(head, "Version")
            if name and version:
                answer["dists"][_normalized(name)] = version
        for relative in args.get("read", []):
            path = os.path.join(site, relative)
            if os.path.isfile(path):
                with open(path, encoding="utf-8", errors="replace") as handle:
                    answer["files"][relative] = handle.read(65536)
    return answer

"""Keep secrets out of plan files: the one mask (engine/mask.py) for secret values, and
no_log steps kept only as a slow salted digest.

``Scrubber`` is the plan's view of the mask: building it records the secret values of the
inventory, the plays and ``-e`` in the one mask, and it masks with all the mask knows
(values rendered from templates included), so a plan, its review and apply's comparison
mask alike.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.mask import MASK, Mask

# scrypt makes guessing a short secret from its digest slow (a plan file may be shared).
SCRYPT = {"n": 2**12, "r": 8, "p": 1, "dklen": 32}


@dataclass(frozen=True)
class Scrubber:
    """Replaces known secret values by ``<hidden: NAME>`` in any text of a plan."""

    mask: Mask = MASK

    @classmethod
    def from_vars(cls, sources: Iterable[Mapping[str, Any]], mask: Mask = MASK) -> Scrubber:
        for variables in sources:
            mask.add_vars(variables)
        return cls(mask)

    def text(self, text: str) -> str:
        return self.mask.text(text)

    def value(self, value: Any) -> Any:
        return self.mask.value(value)


def sealed(salt: bytes, material: Any) -> str:
    """A digest to compare things that may hold secrets, without storing them."""
    blob = json.dumps(material, sort_keys=True, default=str, separators=(",", ":")).encode()
    inner = hashlib.sha256(blob).digest()
    return "scrypt:" + hashlib.scrypt(inner, salt=salt, **SCRYPT).hex()

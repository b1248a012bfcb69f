"""A stand-in for torch, for the collective smoke test's fast tests (the fast tier has no torch).

NOT real: nothing here is torch. Put on a rank's PYTHONPATH (through the serve env the smoke
test passes to its ranks), it hangs or fails the way NCCL has been seen to on PCIe-only GPUs,
as ``STANDIN_TORCH`` says: ``hang`` (all_reduce never returns: local-inference-lab/rtx6kpro#15),
``fail`` (init raises NCCL's "unhandled system error"), ``fail-rank-1`` (rank 1 raises, rank 0
is left waiting for it). The real all-reduce is tested with the vLLM CPU venv's torch (gloo).
"""

from __future__ import annotations

from typing import Any

from torch import distributed

__version__ = "0.0+stand-in"
__all__ = ["cuda", "distributed", "full"]


class cuda:  # torch's spelling
    @staticmethod
    def is_available() -> bool:
        return False


def full(shape: Any, value: float, device: str | None = None) -> list[float]:
    return [value]  # never summed: the stand-in's all_reduce does not return

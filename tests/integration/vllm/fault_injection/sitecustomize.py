"""Test-only fault injection for real vLLM (CPU build): an attention call that faults.

Loaded by Python at start-up when this directory is on PYTHONPATH (the crash tests put it
in the server's environment). When RIGGER_TEST_SIGILL_WHEN names a file that exists, the
next call of vLLM's CPU attention kernel (`vllm._custom_ops.cpu_attention_with_kv_cache`)
raises SIGILL in the calling process - the worker - the way a bf16/AMX kernel faults on a
CPU that advertises instructions it may not run. Everything else is real vLLM.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import signal
import sys
from typing import Any

TARGET_MODULE = "vllm._custom_ops"
TARGET_FUNCTION = "cpu_attention_with_kv_cache"
TRIGGER = os.environ.get("RIGGER_TEST_SIGILL_WHEN")


def _faulting(original: Any) -> Any:
    def attention(*args: Any, **kwargs: Any) -> Any:
        if TRIGGER and os.path.exists(TRIGGER):
            os.kill(os.getpid(), signal.SIGILL)
        return original(*args, **kwargs)

    return attention


class _WrapOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != TARGET_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            load(module)
            setattr(module, TARGET_FUNCTION, _faulting(getattr(module, TARGET_FUNCTION)))

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if TRIGGER:
    sys.meta_path.insert(0, _WrapOnImport())

"""Caches: the engine's compile and autotune caches as fleet artifacts (capture, seed)."""

MODULES = ("engine_cache",)

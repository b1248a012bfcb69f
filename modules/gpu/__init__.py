"""GPU room: GPUs and /dev/shm on the host (idle and healthy GPUs, clean shared memory, GPU facts)."""

from engine.module_api import FactSource

MODULES = ("ensure_gpus_idle", "ensure_gpus_healthy", "ensure_shm_clean")

FACTS = FactSource(probe="gpu_facts", defaults={"gpus": [], "gpu_count": 0, "gpu_backend": "none"})

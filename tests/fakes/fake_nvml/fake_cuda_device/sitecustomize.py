"""What a CUDA context does to /dev, for real processes on a machine without a GPU.

Python imports ``sitecustomize`` at start-up from PYTHONPATH; with this directory there and
RIGGER_FAKE_GPU_DEVICE naming a device node, every python process (a vLLM API server,
its EngineCore and workers, spawned or forked) holds that node open for its lifetime, as
a process with a CUDA context holds /dev/nvidia*. The node is a test's decoy, made in a
private mount namespace. Without the variable this file does nothing.
"""

import os

_device = os.environ.get("RIGGER_FAKE_GPU_DEVICE")
if _device:
    try:
        _HELD_FD = os.open(_device, os.O_RDWR)
    except OSError:
        _HELD_FD = -1

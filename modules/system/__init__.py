"""System room: software on the host (apt, pip, a pinned vLLM build) and waiting for its state."""

MODULES = ("apt", "ensure_vllm", "pip", "wait_for")

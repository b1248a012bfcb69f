"""System room: software and accounts on the host (apt, pip, vLLM, users, groups); waiting for its state."""

MODULES = ("apt", "ensure_vllm", "group", "pip", "user", "wait_for")

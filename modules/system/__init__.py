"""System room: software, accounts and the host name (apt, package, pip, vLLM, users, groups); waiting for its state."""

MODULES = ("apt", "ensure_vllm", "group", "hostname", "package", "pip", "ping", "sysctl", "user", "wait_for")

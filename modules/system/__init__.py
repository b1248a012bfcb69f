"""System room: software, accounts and the host name (apt, package, pip, vLLM, users, groups); waiting for its state."""

MODULES = (
    "apt",
    "apt_repository",
    "authorized_key",
    "dnf",
    "find",
    "get_url",
    "git",
    "ensure_vllm",
    "group",
    "hostname",
    "modprobe",
    "mount",
    "package",
    "pip",
    "ping",
    "sysctl",
    "uri",
    "user",
    "wait_for",
    "yum",
)

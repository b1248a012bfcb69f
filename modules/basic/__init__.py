"""Basic modules: commands, files, variables, messages and assertions."""

MODULES = (
    "assert",
    "command",
    "debug",
    "ensure_absent",
    "fail",
    "group_by",
    "include_vars",
    "pause",
    "raw",
    "script",
    "set_fact",
    "setup",
    "shell",
    "write_file",
)

"""Basic modules: commands, files, variables, messages and assertions."""

MODULES = ("assert", "command", "debug", "ensure_absent", "set_fact", "write_file")

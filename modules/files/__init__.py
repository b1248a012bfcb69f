"""Files room: paths, content and attributes on the host (file, copy, template, lineinfile, stat)."""

MODULES = ("copy", "file", "lineinfile", "stat", "template")

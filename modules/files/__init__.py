"""Files room: paths, content and attributes on the host (file, copy, template, lineinfile, blockinfile, stat)."""

MODULES = ("blockinfile", "copy", "file", "lineinfile", "stat", "template", "unarchive")

"""Files room: paths, content and attributes on the host (file, copy, template, lineinfile, stat, slurp...)."""

MODULES = ("blockinfile", "copy", "file", "lineinfile", "slurp", "stat", "template", "unarchive")

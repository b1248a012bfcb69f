"""Remove a file, a symlink (never its target) or a directory tree."""

MUTATES = True

import os
import shutil


def main(args):
    path = args["path"]
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
    else:
        shutil.rmtree(path)
    return {"removed": path}

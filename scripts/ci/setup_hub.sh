#!/usr/bin/env bash
# Prerequisites of the hub-mirror tests (tests/integration/hub): git + git-lfs to build the
# tiny model repository, and the olah mirror in its own venv (.venv-olah; its pinned
# dependencies may clash with ours). Idempotent and quick when already installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/ci/common.sh

OLAH_VERSION="${OLAH_VERSION:-0.5.4}"
PYTHON="${PYTHON:-python3}"
export DEBIAN_FRONTEND=noninteractive

missing=()
command -v git >/dev/null || missing+=(git)
command -v git-lfs >/dev/null || missing+=(git-lfs)
if [ ${#missing[@]} -gt 0 ]; then
    apt_install "${missing[@]}"
fi

if [ ! -x .venv-olah/bin/olah-cli ] || \
   [ "$(.venv-olah/bin/python -c 'import importlib.metadata as m; print(m.version("olah"))' 2>/dev/null)" != "$OLAH_VERSION" ]; then
    rm -rf .venv-olah
    make_venv .venv-olah "$PYTHON"
    .venv-olah/bin/pip install -q --disable-pip-version-check "olah==${OLAH_VERSION}"
fi
.venv-olah/bin/olah-cli --help >/dev/null
# ensure_model runs huggingface_hub with the host python (tests: the interpreter running pytest).
"$PYTHON" -c 'import huggingface_hub' 2>/dev/null || \
    echo "setup_hub: note: $PYTHON lacks huggingface_hub (pip install -e . provides it)" >&2
echo "setup_hub: git-lfs $(git-lfs version | cut -d' ' -f1), olah ${OLAH_VERSION} in .venv-olah"

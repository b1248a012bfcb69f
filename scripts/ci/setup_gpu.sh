#!/usr/bin/env bash
# Prerequisites of the GPU / shm tests (tests/modules/test_gpu_*, test_shm_*,
# tests/integration/test_incident.py): gcc to build the fake libnvidia-ml.so.1,
# setpriv (util-linux) and a system python3 that an unprivileged user can run (the
# "other user's process" refusal test), nvidia-ml-py for the host python. The vLLM CPU
# venv (.venv-vllm) comes from the serving area's setup. Idempotent; quick when present.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/ci/common.sh

PYTHON="${PYTHON:-python3}"
export DEBIAN_FRONTEND=noninteractive

missing=()
command -v gcc >/dev/null || missing+=(gcc libc6-dev)
command -v setpriv >/dev/null || missing+=(util-linux)
[ -x /usr/bin/python3 ] || missing+=(python3-minimal)
if [ ${#missing[@]} -gt 0 ]; then
    apt_install "${missing[@]}"
fi

"$PYTHON" -c 'import pynvml' 2>/dev/null || \
    "$PYTHON" -m pip install -q --disable-pip-version-check nvidia-ml-py

# Build the fake NVML once now so a compiler problem shows here, not in a test.
"$PYTHON" - <<'PY'
import sys
sys.path.insert(0, "tests/fakes/fake_nvml")
import fakenvml
print("setup_gpu: fake NVML at", fakenvml.build_cached())
PY
echo "setup_gpu: $(gcc --version | head -1), setpriv $(command -v setpriv), /usr/bin/python3 $(/usr/bin/python3 -V 2>&1)"

#!/usr/bin/env bash
# The oracle of the differential suite (tests/differential): real ansible-core in its own
# venv (.venv-ansible), so its pinned dependencies never mix with rigger's. Idempotent and
# quick when already installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/ci/common.sh

ANSIBLE_CORE_VERSION="${ANSIBLE_CORE_VERSION:-2.19.*}"
PYTHON="${PYTHON:-python3}"
export DEBIAN_FRONTEND=noninteractive

installed() {
    .venv-ansible/bin/python -c 'import importlib.metadata as m; print(m.version("ansible-core"))' 2>/dev/null
}

case "$(installed || true)" in
    2.19.*) ;;
    *)
        rm -rf .venv-ansible
        make_venv .venv-ansible "$PYTHON"
        .venv-ansible/bin/pip install -q --disable-pip-version-check "ansible-core==${ANSIBLE_CORE_VERSION}"
        ;;
esac
# Ansible's password_hash filter and password lookup (encrypt=) need passlib; libpass is
# its maintained fork (the same `passlib` import), the one rigger uses too.
.venv-ansible/bin/python -c 'import passlib.hash' 2>/dev/null ||
    .venv-ansible/bin/pip install -q --disable-pip-version-check "libpass>=1.9"
echo "setup_ansible: ansible-core $(installed) in .venv-ansible"

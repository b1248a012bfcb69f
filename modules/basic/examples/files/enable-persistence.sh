#!/bin/sh
# Keep the NVIDIA driver loaded between jobs; record that it was done.
set -eu
nvidia-smi --persistence-mode=1
mkdir -p /var/lib/gpu-setup
touch /var/lib/gpu-setup/persistence-enabled

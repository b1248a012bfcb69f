#!/bin/sh
# Exit 0 when the local vLLM server answers /health (installed by provision_gpu_host.yml).
exec curl --silent --fail --max-time 5 "http://127.0.0.1:${VLLM_PORT:-8000}/health" >/dev/null

#!/bin/sh
# Exit 0 when the local vLLM server answers /health.
exec curl -fsS "http://127.0.0.1:${1:-8000}/health" >/dev/null

"""Serving: start, adopt, stop and measure vLLM servers."""

MODULES = ("check_serving", "serve_vllm")

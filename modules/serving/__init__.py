"""Serving: start, adopt, stop and measure vLLM servers."""

MODULES = ("check_serving", "ray_cluster", "serve_vllm")

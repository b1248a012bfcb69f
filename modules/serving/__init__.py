"""Serving: start, adopt, stop and measure vLLM servers."""

MODULES = ("check_serving", "check_serving_group", "ray_cluster", "serve_vllm", "serve_vllm_group")

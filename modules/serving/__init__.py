"""Serving: start, adopt, stop and measure vLLM servers (and, as a host fact, the servers
serve_vllm recorded there, with what each start logged about itself)."""

from engine.module_api import FactSource

MODULES = ("check_serving", "check_serving_group", "ray_cluster", "serve_vllm", "serve_vllm_group")

FACTS = FactSource(probe="vllm_servers", defaults={"vllm_servers": []})

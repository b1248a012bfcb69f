"""Helpers for serve_vllm and check_serving: the launch spec, readiness, log phases."""

"""Checkpoints: Hugging Face models on the host (download, verify, patch, serving preflight)."""

MODULES = ("check_serving_compat", "ensure_model", "patch_quant_config", "spread_model")

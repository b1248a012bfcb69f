"""Helpers for the model modules: JSON edits, manifests, safetensors checks, compat rules."""

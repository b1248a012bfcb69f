"""Probes of the gpu room: stdlib-only scripts that run on the host (see engine/probes)."""

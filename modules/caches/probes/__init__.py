"""Probes of the caches room: stdlib-only scripts that run on the host (see engine/probes)."""

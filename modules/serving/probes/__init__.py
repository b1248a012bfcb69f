"""Probes of the serving room: stdlib-only scripts that run on the host (see engine/probes)."""

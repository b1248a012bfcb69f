"""Probes of the system room: stdlib-only scripts that run on the host (see engine/probes)."""

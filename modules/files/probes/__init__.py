"""Probes of the files room: stdlib-only scripts that run on the host (see engine/probes)."""

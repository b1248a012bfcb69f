"""Probes of the checkpoints room: stdlib-only scripts that run on the host (see engine/probes)."""

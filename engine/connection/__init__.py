"""Connections: how the engine reaches a host (local subprocess, SSH)."""

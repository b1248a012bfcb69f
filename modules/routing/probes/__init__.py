"""Probes of the routing room: stdlib-only scripts that run on the load balancer's host."""

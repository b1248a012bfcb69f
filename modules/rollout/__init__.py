"""Rollout: a serving change taken across a fleet in gated batches, behind the load balancer,
each host put back on its previous server by itself when a gate fails."""

MODULES = ("rollout",)

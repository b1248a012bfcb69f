"""Routing: the load balancer in front of the serving hosts (HAProxy's runtime API): which
upstream server takes new requests, drained, or held in maintenance."""

MODULES = ("lb_backend",)

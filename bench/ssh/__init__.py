"""Helpers of the SSH benchmark (bench/ssh_bench.py)."""

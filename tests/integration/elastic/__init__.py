"""Elastic serving through a real cluster: replicas by load, on demand, priorities, fallbacks,
CPU cores reserved, weights caches kept within their share of the disk."""

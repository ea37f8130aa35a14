"""Simulator: hash-table vs radix-tree KV-cache indexes under eviction policies (issue 6)."""

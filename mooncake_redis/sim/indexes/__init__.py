"""The in-memory experiment: hash-table and radix-tree indexes under eviction policies on a
generated multi-turn chat workload (runner), and what each run measured (metrics)."""

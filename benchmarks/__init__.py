"""Benchmarks of mooncake-redis against the baselines it replaces (docs/BENCHMARKS.md)."""

"""The service experiment: page chains replayed on the real service (an Index) under
leaf-first and lease-ordered eviction, next to the in-memory ideal."""

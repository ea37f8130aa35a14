"""Capacity: the byte limit put_start checks per shard (admission), borrowing limit from
shards with spare (borrowing), and leaf-first cascading eviction under the watermark
(eviction). Imports the core and the tree."""

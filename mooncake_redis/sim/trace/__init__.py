"""Traces: Mooncake's JSONL trace files and synthetic ones, their requests as page chains,
and the in-memory replay of page chains on a hash table or a radix tree."""

"""The radix-tree index over fixed-width string keys: one character per tree unit."""

from __future__ import annotations

from mooncake_redis.sim.indexes.compressed_trie import CompressedTrieIndex
from mooncake_redis.sim.indexes.keys import CacheKey, format_key, string_prefix


class StringAlgebra:
    """Characters as units; Python's string order is the key order."""

    empty = ""

    def length(self, key: str) -> int:
        return len(key)

    def unit(self, sequence: str, length: int, index: int) -> str:
        return sequence[index]

    def prefix(self, sequence: str, length: int, depth: int) -> str:
        return sequence[:depth]

    def common_length(self, first: str, first_length: int, second: str, second_length: int) -> int:
        limit = min(first_length, second_length)
        shared = 0
        while shared < limit and first[shared] == second[shared]:
            shared += 1
        return shared

    def has_prefix(self, key: str, length: int, prefix: str, depth: int) -> bool:
        return key.startswith(prefix)


class RadixTreeIndex(CompressedTrieIndex[str]):
    """Compressed radix tree keyed by `0001:012:08:000456` strings."""

    name = "radix"

    def __init__(self) -> None:
        super().__init__(StringAlgebra())

    def encode_key(self, key: CacheKey) -> str:
        return format_key(key)

    def find_by_prefix(
        self, sequence: int, layer: int | None = None, head: int | None = None
    ) -> list[str]:
        prefix = string_prefix(sequence, layer, head)
        return self.keys_with_prefix(prefix, len(prefix))

"""The bitwise radix-tree index over packed 64-bit integer keys: one bit per tree unit."""

from __future__ import annotations

from mooncake_redis.sim.indexes.compressed_trie import CompressedTrieIndex
from mooncake_redis.sim.indexes.keys import (
    PACKED_KEY_BITS,
    CacheKey,
    pack_key,
    packed_prefix,
)


class BitAlgebra:
    """Bits as units, most significant first; a sequence of `length` bits is an int below
    2**length, so comparing two equally long sequences as ints is key order."""

    empty = 0

    def length(self, key: int) -> int:
        return PACKED_KEY_BITS

    def unit(self, sequence: int, length: int, index: int) -> int:
        return (sequence >> (length - index - 1)) & 1

    def prefix(self, sequence: int, length: int, depth: int) -> int:
        return sequence >> (length - depth)

    def common_length(self, first: int, first_length: int, second: int, second_length: int) -> int:
        limit = min(first_length, second_length)
        difference = (first >> (first_length - limit)) ^ (second >> (second_length - limit))
        return limit - difference.bit_length()

    def has_prefix(self, key: int, length: int, prefix: int, depth: int) -> bool:
        return key >> (length - depth) == prefix


class BitwiseRadixTreeIndex(CompressedTrieIndex[int]):
    """Compressed binary radix tree (PATRICIA-like) keyed by packed integers."""

    name = "bitwise-radix"

    def __init__(self) -> None:
        super().__init__(BitAlgebra())

    def encode_key(self, key: CacheKey) -> int:
        return pack_key(key)

    def find_by_prefix(
        self, sequence: int, layer: int | None = None, head: int | None = None
    ) -> list[int]:
        prefix = packed_prefix(sequence, layer, head)
        return self.keys_with_prefix(prefix.value, prefix.length)

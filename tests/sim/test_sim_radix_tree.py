"""Radix-tree structure (split, merge, prefix queries, ordered and pruned iteration) against
brute force on seeded random key sets."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from mooncake_redis.sim.indexes.bitwise_radix import BitwiseRadixTreeIndex
from mooncake_redis.sim.indexes.compressed_trie import CompressedTrieIndex
from mooncake_redis.sim.indexes.keys import CacheKey, parse_key, unpack_key
from mooncake_redis.sim.indexes.radix_tree import RadixTreeIndex, StringAlgebra

TREES: list[Callable[[], CompressedTrieIndex]] = [RadixTreeIndex, BitwiseRadixTreeIndex]  # type: ignore[type-arg]


def _random_cache_key(rng: random.Random) -> CacheKey:
    # Few distinct values per field, so that keys share long prefixes and edges split.
    return CacheKey(rng.randrange(4), rng.randrange(3), rng.randrange(3), rng.randrange(300))


@pytest.mark.parametrize("make_tree", TREES, ids=["radix", "bitwise-radix"])
@pytest.mark.parametrize("seed", range(4))
def test_random_inserts_and_removals_match_a_sorted_reference(make_tree, seed: int) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    tree = make_tree()
    reference: set = set()  # type: ignore[type-arg]
    for step in range(3000):
        key = tree.encode_key(_random_cache_key(rng))
        if rng.random() < 0.6:
            tree.insert(key)
            reference.add(key)
        else:
            assert tree.remove(key) == (key in reference)
            reference.discard(key)
        if step % 500 == 499:
            tree.check_invariants()
            assert list(tree) == sorted(reference)
            assert len(tree) == len(reference)
            # A compressed tree has at most one internal node per branching: < 2n nodes.
            assert tree.node_count() <= 2 * len(reference)
    probe_keys = [tree.encode_key(_random_cache_key(rng)) for _ in range(300)]
    assert [tree.find(key) for key in probe_keys] == [key in reference for key in probe_keys]
    for _ in range(50):
        low, high = sorted(tree.encode_key(_random_cache_key(rng)) for _ in range(2))
        assert tree.keys_in_range(low, high) == sorted(k for k in reference if low <= k < high)
    for sequence in range(5):
        for layer, head in [(None, None), (0, None), (2, None), (0, 1), (2, 1)]:
            wanted = (sequence, layer, head)
            expected = sorted(
                key
                for key in reference
                if all(want is None or want == got for want, got in zip(wanted, _fields(key)))
            )
            assert tree.find_by_prefix(sequence, layer, head) == expected


def _fields(key: str | int) -> CacheKey:
    return parse_key(key) if isinstance(key, str) else unpack_key(key)


def test_insert_splits_an_edge_and_removal_merges_it_back() -> None:
    tree = RadixTreeIndex()
    tree.insert("0001:000:00:000100")
    assert tree.node_count() == 1  # one leaf holding the whole key as its edge
    tree.insert("0001:000:00:000199")
    # The shared prefix "0001:000:00:0001" became an internal node with two leaves.
    assert tree.node_count() == 3
    assert tree.keys_with_prefix("0001:000:00:0001", 16) == [
        "0001:000:00:000100",
        "0001:000:00:000199",
    ]
    tree.check_invariants()
    tree.remove("0001:000:00:000199")
    assert tree.node_count() == 1  # the split node had one child left and was merged away
    tree.check_invariants()
    tree.remove("0001:000:00:000100")
    assert tree.node_count() == 0 and len(tree) == 0


def test_a_key_that_is_a_prefix_of_another_is_a_terminal_inner_node() -> None:
    tree = RadixTreeIndex()
    for key in ["abc", "ab", "abd", "b"]:
        tree.insert(key)
    tree.check_invariants()
    assert list(tree) == ["ab", "abc", "abd", "b"]
    assert tree.keys_with_prefix("ab", 2) == ["ab", "abc", "abd"]
    assert tree.keys_with_prefix("a", 1) == ["ab", "abc", "abd"]
    assert tree.keys_with_prefix("abx", 3) == []
    tree.remove("abc")
    tree.remove("abd")
    tree.check_invariants()
    assert list(tree) == ["ab", "b"] and tree.node_count() == 2


class _CountingStringAlgebra(StringAlgebra):
    """Counts prefix() calls: the bounded traversal makes two per node it visits."""

    def __init__(self) -> None:
        self.prefix_calls = 0

    def prefix(self, sequence: str, length: int, depth: int) -> str:
        self.prefix_calls += 1
        return super().prefix(sequence, length, depth)


def test_ordered_range_traversal_skips_subtrees_outside_the_range() -> None:
    algebra = _CountingStringAlgebra()
    tree = CompressedTrieIndex(algebra)
    encode = RadixTreeIndex().encode_key
    for sequence in range(10):
        for position in range(1000):
            tree.insert(encode(CacheKey(sequence, 0, 0, position)))
    algebra.prefix_calls = 0
    low, high = encode(CacheKey(4, 0, 0, 500)), encode(CacheKey(4, 0, 0, 510))
    assert tree.keys_in_range(low, high) == [encode(CacheKey(4, 0, 0, p)) for p in range(500, 510)]
    # 10,000 keys, ~11,000 nodes: visiting a path down plus the 10 leaves and their siblings'
    # roots costs a few dozen nodes; a full walk would be thousands.
    assert algebra.prefix_calls < 2 * 60

"""A compressed radix tree over any key made of units (characters, bits), with tiered LRU lists."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any, Generic, Protocol, TypeVar

from mooncake_redis.sim.indexes.cache_index import NORMAL_TIER, TIER_COUNT
from mooncake_redis.sim.indexes.lru_list import LruList

KeyT = TypeVar("KeyT")


class KeyAlgebra(Protocol[KeyT]):
    """How the tree takes a key apart. A 'sequence' is a key or a prefix of `length` units."""

    empty: KeyT

    def length(self, key: KeyT) -> int:
        """How many units a full key has."""
        ...

    def unit(self, sequence: KeyT, length: int, index: int) -> Hashable:
        """The unit at `index`; children are indexed by it, and its order is key order."""
        ...

    def prefix(self, sequence: KeyT, length: int, depth: int) -> KeyT:
        """The first `depth` units (depth <= length)."""
        ...

    def common_length(self, first: KeyT, first_length: int, second: KeyT,
                      second_length: int) -> int:
        """How many leading units the two sequences share."""
        ...

    def has_prefix(self, key: KeyT, length: int, prefix: KeyT, depth: int) -> bool:
        """Whether the key's first `depth` units are `prefix`."""
        ...


class TrieNode:
    """A node keeps its whole prefix from the root, so merging a node away is a splice."""

    __slots__ = (
        "children",
        "depth",
        "is_terminal",
        "label",
        "lru_next",
        "lru_previous",
        "parent",
        "path",
        "tier",
    )

    def __init__(self, path: Any, depth: int, parent: TrieNode | None, label: Hashable) -> None:
        self.path = path
        self.depth = depth
        self.parent = parent
        self.label = label  # this node's key in parent.children: the unit at parent.depth
        self.children: dict[Hashable, TrieNode] = {}
        self.is_terminal = False
        self.tier = NORMAL_TIER
        self.lru_previous: Any = None
        self.lru_next: Any = None


class CompressedTrieIndex(Generic[KeyT]):
    """Insert splits an edge where a new key diverges; removal merges single-child nodes back.

    Terminal nodes (cached keys) are threaded on one LRU list per tier, so the oldest entry of
    a tier is found in O(1). Prefix queries walk O(prefix length) to a subtree; ordered
    traversal skips every subtree whose prefix lies outside the asked range.
    """

    name = "compressed-trie"

    def __init__(self, algebra: KeyAlgebra[KeyT]) -> None:
        self._algebra = algebra
        self._root = TrieNode(algebra.empty, 0, None, None)
        self._lru_by_tier: list[LruList[TrieNode]] = [LruList() for _ in range(TIER_COUNT)]
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[KeyT]:
        return (node.path for node in self._terminals_in_order(self._root))

    def find(self, key: KeyT) -> bool:
        return self._find_node(key) is not None

    def access(self, key: KeyT) -> bool:
        node = self._find_node(key)
        if node is None:
            return False
        self._lru_by_tier[node.tier].move_to_end(node)
        return True

    def insert(self, key: KeyT, tier: int = NORMAL_TIER) -> None:
        node = self._insert_node(key)
        if node.is_terminal:
            self._lru_by_tier[node.tier].unlink(node)
        else:
            node.is_terminal = True
            self._size += 1
        node.tier = tier
        self._lru_by_tier[tier].append(node)

    def remove(self, key: KeyT) -> bool:
        node = self._find_node(key)
        if node is None:
            return False
        self._drop_terminal(node)
        return True

    def evict_oldest(self, tier: int) -> KeyT | None:
        node = self._lru_by_tier[tier].oldest()
        if node is None:
            return None
        self._drop_terminal(node)
        return node.path  # type: ignore[no-any-return]

    def keys_in_range(self, low: KeyT, high: KeyT) -> list[KeyT]:
        return [node.path for node in self._terminals_in_order(self._root, low, high)]

    def keys_with_prefix(self, prefix: KeyT, prefix_length: int) -> list[KeyT]:
        """Cached keys starting with `prefix`, in key order."""
        subtree = self._subtree_with_prefix(prefix, prefix_length)
        if subtree is None:
            return []
        return [node.path for node in self._terminals_in_order(subtree)]

    def node_count(self) -> int:
        """All nodes but the root: what the compression keeps small."""
        count, stack = 0, [self._root]
        while stack:
            node = stack.pop()
            count += 1
            stack.extend(node.children.values())
        return count - 1

    def check_invariants(self) -> None:
        """Raise AssertionError where the tree is not a valid compressed radix tree."""
        algebra, terminals, stack = self._algebra, 0, [self._root]
        while stack:
            node = stack.pop()
            terminals += node.is_terminal
            if node is not self._root and not node.is_terminal:
                assert len(node.children) >= 2, f"uncompressed node at {node.path!r}"
            for label, child in node.children.items():
                assert child.parent is node and child.label == label
                assert child.depth > node.depth
                assert algebra.prefix(child.path, child.depth, node.depth) == node.path
                assert algebra.unit(child.path, child.depth, node.depth) == label
                stack.append(child)
        listed = [node for lru in self._lru_by_tier for node in lru]
        assert len(listed) == terminals == self._size, "LRU lists and terminals disagree"
        assert all(node.is_terminal and node.tier == tier
                   for tier, lru in enumerate(self._lru_by_tier) for node in lru)

    def _find_node(self, key: KeyT) -> TrieNode | None:
        algebra = self._algebra
        length = algebra.length(key)
        node = self._root
        while node.depth < length:
            child = node.children.get(algebra.unit(key, length, node.depth))
            if child is None or not algebra.has_prefix(key, length, child.path, child.depth):
                return None
            node = child
        return node if node.is_terminal else None

    def _insert_node(self, key: KeyT) -> TrieNode:
        algebra = self._algebra
        length = algebra.length(key)
        node = self._root
        while node.depth < length:
            label = algebra.unit(key, length, node.depth)
            child = node.children.get(label)
            if child is None:
                leaf = TrieNode(key, length, node, label)
                node.children[label] = leaf
                return leaf
            common = algebra.common_length(key, length, child.path, child.depth)
            if common == child.depth:
                node = child
                continue
            # The key leaves the child's edge part-way: split the edge at the divergence.
            middle = TrieNode(algebra.prefix(key, length, common), common, node, label)
            node.children[label] = middle
            child.parent = middle
            child.label = algebra.unit(child.path, child.depth, common)
            middle.children[child.label] = child
            node = middle
        return node

    def _drop_terminal(self, node: TrieNode) -> None:
        self._lru_by_tier[node.tier].unlink(node)
        node.is_terminal = False
        self._size -= 1
        self._compact_from(node)

    def _compact_from(self, node: TrieNode) -> None:
        # A non-terminal node with no child is dead; one with a single child is an edge
        # split that is no longer needed. Removing a leaf can leave its parent with one.
        while node is not self._root and not node.is_terminal:
            parent = node.parent
            assert parent is not None
            if not node.children:
                del parent.children[node.label]
                node = parent
                continue
            if len(node.children) == 1:
                (only_child,) = node.children.values()
                only_child.parent = parent
                only_child.label = node.label
                parent.children[node.label] = only_child
            return

    def _subtree_with_prefix(self, prefix: KeyT, prefix_length: int) -> TrieNode | None:
        algebra = self._algebra
        node = self._root
        while node.depth < prefix_length:
            child = node.children.get(algebra.unit(prefix, prefix_length, node.depth))
            if child is None:
                return None
            overlap = min(prefix_length, child.depth)
            if algebra.common_length(prefix, prefix_length, child.path, child.depth) < overlap:
                return None
            node = child
        return node

    def _terminals_in_order(
        self, start: TrieNode, low: KeyT | None = None, high: KeyT | None = None
    ) -> Iterator[TrieNode]:
        """Depth-first in key order; with bounds, a subtree whose prefix sorts wholly below
        `low` or above `high` is skipped without visiting it."""
        algebra = self._algebra
        bounded = low is not None and high is not None
        low_length = algebra.length(low) if bounded else 0  # type: ignore[arg-type]
        high_length = algebra.length(high) if bounded else 0  # type: ignore[arg-type]
        stack = [start]
        while stack:
            node = stack.pop()
            if bounded:
                depth = node.depth
                if node.path < algebra.prefix(low, low_length, min(depth, low_length)):  # type: ignore[arg-type, operator]
                    continue
                if node.path > algebra.prefix(high, high_length, min(depth, high_length)):  # type: ignore[arg-type, operator]
                    continue
                if node.is_terminal and low <= node.path < high:  # type: ignore[operator]
                    yield node
            elif node.is_terminal:
                yield node
            stack.extend(child for _, child in sorted(node.children.items(), reverse=True))

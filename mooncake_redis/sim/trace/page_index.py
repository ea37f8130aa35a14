"""Where cached pages live: a hash table (no structure) or a radix tree over page chains
(parent links; only leaves may be evicted)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

from mooncake_redis.sim.trace.pages import NO_PARENT


class PageIndex(Protocol):
    """Cached pages, numbered as in a PageTrace. The index decides which pages may be
    evicted; the policy (a sort key) decides in which order."""

    name: str

    @property
    def pages(self) -> Collection[int]:
        """The cached pages (a set or dict: `in` and `len` at C speed in the replay loop)."""
        ...

    def match(self, chain: Sequence[int]) -> tuple[int, int]:
        """(pages of the chain that are cached, length of the cached leading run)."""
        ...

    def insert(self, page: int) -> None:
        """Cache `page` (not cached yet)."""
        ...

    def is_evictable(self, page: int) -> bool:
        """Whether `page` is cached and may be evicted now."""
        ...

    def remove(self, page: int) -> int | None:
        """Evict `page` (evictable); return a page that became evictable by it, if any."""
        ...


class HashPageIndex:
    """A set of page hashes: every cached page is evictable, so a page may outlive its
    parent (an orphan: cached, but no prefix match can reach it)."""

    name = "hash"

    def __init__(self, parents: Sequence[int]) -> None:
        del parents  # a hash table knows no structure: it is what it lacks
        self._pages: set[int] = set()

    def match(self, chain: Sequence[int]) -> tuple[int, int]:
        pages = self._pages
        found = 0
        leading = -1
        for position, page in enumerate(chain):
            if page in pages:
                found += 1
            elif leading < 0:
                leading = position
        return found, len(chain) if leading < 0 else leading

    @property
    def pages(self) -> Collection[int]:
        return self._pages

    def insert(self, page: int) -> None:
        self._pages.add(page)

    def is_evictable(self, page: int) -> bool:
        return page in self._pages

    def remove(self, page: int) -> int | None:
        self._pages.remove(page)
        return None


class TreeNode:
    """One page of the tree: its parent link and its cached children by page."""

    __slots__ = ("children", "page", "parent")

    def __init__(self, page: int, parent: TreeNode | None) -> None:
        self.page = page
        self.parent = parent
        self.children: dict[int, TreeNode] = {}


class RadixPageTree:
    """A radix tree over page chains, one node per page (as SGLang's with page-sized keys,
    without merging single-child runs). A page is inserted under its cached parent and only
    leaves are evictable, so no cached page is ever an orphan; when a node's last child
    goes, `remove` hands it back as a new leaf, to compete at once with its own score."""

    name = "radix"

    def __init__(self, parents: Sequence[int]) -> None:
        self._parents = parents
        self._root = TreeNode(NO_PARENT, None)
        self._nodes: dict[int, TreeNode] = {}
        """Page -> node, so that the eviction heap can name pages; lookups walk the tree."""

    def match(self, chain: Sequence[int]) -> tuple[int, int]:
        node = self._root
        matched = 0
        for page in chain:
            child = node.children.get(page)
            if child is None:
                break
            node = child
            matched += 1
        return matched, matched

    @property
    def pages(self) -> Collection[int]:
        return self._nodes.keys()

    def insert(self, page: int) -> None:
        parent_page = self._parents[page]
        parent = self._root if parent_page == NO_PARENT else self._nodes.get(parent_page)
        if parent is None:
            raise ValueError(f"page {page} cannot be cached: its parent {parent_page} is not")
        parent.children[page] = self._nodes[page] = TreeNode(page, parent)

    def is_evictable(self, page: int) -> bool:
        node = self._nodes.get(page)
        return node is not None and not node.children

    def remove(self, page: int) -> int | None:
        node = self._nodes[page]
        if node.children:
            raise ValueError(f"page {page} has cached children: only leaves are evicted")
        del self._nodes[page]
        parent = node.parent
        assert parent is not None
        del parent.children[page]
        if parent is self._root or parent.children:
            return None
        return parent.page

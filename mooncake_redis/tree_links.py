"""Cross-shard parent/child links in a safe order instead of locks.

A child and its parent usually sit in different shards, so no one script may touch
both. The order below keeps "a live child's parent node exists and lists it" true
after a crash at any point, and repairs the one race it leaves open:

- link: the parent lists the child (creating a shell parent) BEFORE the child node is
  written, and once more AFTER it, because a concurrent cascade may have unlinked the
  child in between.
- unlink: the child node is deleted first (by the delete or evict script), then removed
  from its parent; a parent left empty is deleted and the cascade goes on upward. Right
  after each unlink the child is read back: if a concurrent put recreated it under the
  same parent meanwhile, it is linked again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from .batch import Batch, raise_first_error
from .errors import CycleDetected, MooncakeRedisError
from .keys import KeySchema
from .scripts import Scripts

Link = tuple[str, str]
"""(child hash, parent hash)"""


class TreeLinks:
    def __init__(self, schema: KeySchema, scripts: Scripts, new_batch: Callable[[], Batch],
                 max_depth: Callable[[], int]):
        self._schema = schema
        self._scripts = scripts
        self._new_batch = new_batch
        self._max_depth = max_depth

    def queue_links(self, batch: Batch, links: Iterable[Link]) -> None:
        for child, parent in links:
            self._scripts.link_child(batch, parent, child)

    def check_no_cycles(self, links: Sequence[Link], batch_parents: dict[str, str]) -> None:
        """Refuse links that would make a node its own ancestor: walk up from each new
        parent (all walks step together, one round trip per level) looking for the child.
        `batch_parents` holds parents being registered in the same call."""
        walks = dict(links)
        for _ in range(self._max_depth()):
            for child, cursor in list(walks.items()):
                if cursor == child:
                    raise CycleDetected(
                        f"linking node {child} under {links_parent(links, child)} would make it "
                        "its own ancestor",
                        prefix_hash=child,
                    )
            unresolved = {c: cur for c, cur in walks.items() if cur not in batch_parents}
            batch = self._new_batch()
            for cursor in unresolved.values():
                batch.command("HGET", self._schema.node_keys(cursor).node, "parent")
            stored = dict(zip(unresolved, batch.execute()))
            walks = {
                child: batch_parents[cursor] if cursor in batch_parents else stored[child]
                for child, cursor in walks.items()
                if cursor in batch_parents or stored[child]
            }
            if not walks:
                return
        raise CycleDetected(f"parent chain deeper than max_depth={self._max_depth()}: "
                            "a cycle or a tree deeper than configured")

    def cascade(self, emptied: Iterable[Link]) -> None:
        """Unlink deleted nodes from their parents, level by level (one round trip per
        level for all of them), deleting parents left empty."""
        pending = [(child, parent) for child, parent in emptied if parent]
        for _ in range(self._max_depth()):
            if not pending:
                return
            batch = self._new_batch()
            for child, parent in pending:
                self._scripts.unlink_child(batch, parent, child)
            batch.barrier()  # the read-back must see the child as it is after the unlink
            for child, _ in pending:
                batch.command("HGET", self._schema.node_keys(child).node, "parent")
            results = batch.execute()
            raise_first_error(results)
            next_pending: list[Link] = []
            relink: list[Link] = []
            for (child, parent), (parent_deleted, grandparent), child_parent in zip(
                pending, results[:len(pending)], results[len(pending):]
            ):
                if child_parent == parent:
                    relink.append((child, parent))
                if int(parent_deleted) and grandparent:
                    next_pending.append((parent, grandparent))
            if relink:
                batch = self._new_batch()
                self.queue_links(batch, relink)
                raise_first_error(batch.execute())
            pending = next_pending
        if pending:
            raise MooncakeRedisError(
                f"cascade stopped at max_depth={self._max_depth()}; run fsck to finish it"
            )


def links_parent(links: Sequence[Link], child: str) -> str:
    return next(parent for c, parent in links if c == child)


def find_cycle_in_memory(parents: dict[str, str]) -> None:
    """Raise CycleDetected if following `parents` from some node comes back to it (each
    node has one parent, so one pass with a colour per node is O(n))."""
    done: set[str] = set()
    for start in parents:
        path: set[str] = set()
        cursor: str | None = start
        while cursor is not None and cursor not in done:
            if cursor in path:
                raise CycleDetected(f"the links of this batch form a cycle through {cursor}",
                                    prefix_hash=cursor)
            path.add(cursor)
            cursor = parents.get(cursor)
        done |= path

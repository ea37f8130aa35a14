"""Hooks through which a metrics exporter sees what this process does, without the library
depending on prometheus-client: items refused by batch calls, and the time of the batches
that carry each script. Empty lists cost one truth test per batch (eviction jobs have
theirs beside them: eviction.job_observers)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .models import Result

refusal_observers: list[Callable[[str, str, str], None]] = []
"""Called with (namespace, operation, error class name) for every item a batch call of
Index refused: put_start, put_end, put_revoke, get, remove, register_radix_tree_node."""

script_observers: list[Callable[[str, float], None]] = []
"""Called with (script name, seconds) once per script name per executed batch: the time
from sending the batch to reading its last reply, the latency a caller of that script saw
(one round trip on a single Redis; every barrier segment on a cluster)."""


def count_refusals(namespace: str, operation: str, results: Sequence[Result[Any]]) -> None:
    """Tell the refusal observers about each refused item."""
    if refusal_observers:
        for result in results:
            if result.error is not None:
                for observer in refusal_observers:
                    observer(namespace, operation, type(result.error).__name__)

hicache_observers: list[Callable[[str, str, int], None]] = []
"""Called with (namespace, counter, amount) when a HiCache backend of this process adds to
one of its counters (hicache.HiCacheCounters: batches_without_parent, parents_linked,
conflicting_pages)."""

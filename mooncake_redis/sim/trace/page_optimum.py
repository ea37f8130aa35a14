"""Belady's offline optimum over page chains, as a sort key: the evictable page whose next
use is farthest goes first, the deeper of two with the same next use first.

What "optimal" means here. The replay (page_replay.PageReplay) is demand paging with
pages of one size and requests that are chains: a request reads the cached pages of its
chain and then holds its whole chain cached (its first C pages when longer than a cache
of C pages), evicting only other pages, and only as many as it must. The optimum is the
schedule of victims with the most hits over the whole trace. On the radix tree there is
one more rule: a page may not go while a descendant stays cached (leaf-first).

Why this order is that optimum, on either index:

1. A request that uses a page uses all its ancestors, so a page's next use is never later
   than any descendant's. Ordered by (next use, depth), farthest and deepest first, every
   cached descendant of a page comes before it: the order only ever names a leaf, and the
   leaf-first rule never binds. The radix tree and the hash table evict the same pages
   (ties broken by page number, so that this holds page for page).
2. Without the rule, for unit pages and requests that each need a set of pages cached
   together, evicting the farthest next use first misses least (Belady's exchange
   argument: swap a schedule's victim for one used later, and it misses no more). The
   tree only removes schedules, and (1) says it keeps this one, so the order is optimal
   with the rule too, per-page and usable-prefix hits alike (with no orphan they are
   equal, and usable hits never exceed per-page hits under any policy).

tests/sim/test_sim_optimum.py checks it against a search of every schedule on tiny traces,
and that no policy on either index gets more hits.

Not modelled: declining to store a page (admission). The engine has computed the KV of
every page of its request; a policy here decides only what leaves."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from mooncake_redis.sim.indexes.optimum import OPTIMUM_POLICY
from mooncake_redis.sim.trace.page_policies import PagePolicy
from mooncake_redis.sim.trace.pages import NO_PARENT


def page_depths(parents: Sequence[int]) -> list[int]:
    """Page -> pages above it (0 for a first page); parents are numbered before children."""
    depths: list[int] = []
    for parent in parents:
        depths.append(0 if parent == NO_PARENT else depths[parent] + 1)
    return depths


class PageBeladyPolicy(PagePolicy):
    """The offline optimum, knowing every request to come: a page's score is minus its next
    use (request number), depth and page number, so the farthest, deepest page sorts first
    and no two pages tie (pages no request uses again would otherwise tie, and fall by
    push order, which differs between the indexes). Scores stay exact integers in a float
    up to 2**53, some 10**15: a trace's requests x depth x pages is far below."""

    name = OPTIMUM_POLICY

    def __init__(self, chains: Sequence[Sequence[int]], parents: Sequence[int]) -> None:
        super().__init__()
        self._uses: list[list[int]] = [[] for _ in parents]
        for request, chain in enumerate(chains):
            for page in chain:
                self._uses[page].append(request)
        self._depths = page_depths(parents)
        self._never = len(chains)
        """The next use of a page no request uses again: after every real one."""
        self._depth_span = max(self._depths, default=0) + 1
        self._page_span = len(parents)
        self._request = -1
        self._scores: dict[int, float] = {}

    def start_request(self) -> None:
        self._request += 1

    def record_use(self, page: int) -> float:
        uses = self._uses[page]
        following = bisect_right(uses, self._request)
        next_use = uses[following] if following < len(uses) else self._never
        rank = (next_use * self._depth_span + self._depths[page]) * self._page_span + page
        score = self._scores[page] = -float(rank)
        return score

    def score(self, page: int) -> float:
        return self._scores[page]

    def forget(self, page: int) -> None:
        del self._scores[page]

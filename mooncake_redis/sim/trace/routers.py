"""What one shared index buys N routers: N gateways in front of one KV pool, each
consulting either its own index or the one index all share (this service).

The model. Requests arrive in trace order; a routing policy sends each to one of N
gateways (`random`: any, uniformly; `sticky`: its session's, chosen at random when the
session first arrives). The gateway looks the request's page chain up in the index it
consults and tells the engine to load the prefix found; the engine computes the rest and
stores every page of the chain in the pool (a page the pool already holds stays one
copy). The pool is one radix tree under leaf-first LRU at a capacity in pages (at 1.0 it
keeps every page); every request leaves its whole chain in it, used, whatever the
routing, so the pool is the same in every configuration.

A hit is a page of the request's leading run that the consulted index lists and the
pool holds: what the engine loads instead of computing.

- Shared index: the pool's own index. It lists exactly what the pool holds, so its hits
  are the pool's cached leading run, for every N and routing.
- Separate indexes: gateway i's index lists every page of every request routed to i
  (what it loaded or stored) and learns nothing else: not the pages other gateways
  stored, not the pool's evictions. A page another gateway stored is in the pool but
  unknown here: a miss, computed and stored again. A page the index lists that the pool
  evicted is a miss as well; those are counted as `stale_pages`.

Follow-ups: requests whose session had an earlier request (the anchor's measure: what a
conversation's next turn finds). Sessions are the trace's own where it names them (our
generated traces do), else derived (`derive_sessions`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tqdm import tqdm

from mooncake_redis.sim.indexes.runner import check_capacity_fractions, check_names
from mooncake_redis.sim.trace.pages import PageTrace
from mooncake_redis.sim.trace.runner import TraceSettings, capacity_pages, new_replay

ROUTINGS = ("random", "sticky")
ROUTER_COUNTS = (1, 2, 4, 8)
ROUTING_SEED = 0
"""Seed of the routing draws, so that a run is deterministic."""


def derive_sessions(chains: Sequence[Sequence[int]]) -> list[int]:
    """Request -> session, for a trace that names none.

    A request continues the session of an earlier request it repeats whole, or whole but
    for its last page (a conversation's next turn repeats the last turn's input, whose
    last block was partial and so hashes differently): the latest request whose chain
    ends at the deepest page this one shares with earlier requests, else the latest whose
    chain ends one page after it. Otherwise it starts a session. A new conversation whose
    shared system prompt is all of an earlier request but its last page is taken for a
    follow-up of it: the rule cannot tell them apart."""
    ends_at: dict[int, int] = {}  # page -> latest request whose last page it is
    ends_after: dict[int, int] = {}  # page -> latest request whose last page follows it
    seen: set[int] = set()
    sessions: list[int] = []
    started = 0
    for request, chain in enumerate(chains):
        shared = 0
        while shared < len(chain) and chain[shared] in seen:
            shared += 1
        deepest = chain[shared - 1] if shared else None
        base = ends_at.get(deepest, ends_after.get(deepest)) if deepest is not None else None
        if base is not None:
            sessions.append(sessions[base])
        else:
            sessions.append(started)
            started += 1
        seen.update(chain)
        if chain:
            ends_at[chain[-1]] = request
        if len(chain) > 1:
            ends_after[chain[-2]] = request
    return sessions


def follow_ups(sessions: Sequence[int]) -> list[bool]:
    """Request -> whether an earlier request was in its session."""
    seen: set[int] = set()
    result = []
    for session in sessions:
        result.append(session in seen)
        seen.add(session)
    return result


def route(sessions: Sequence[int], routers: int, routing: str,
          seed: int = ROUTING_SEED) -> list[int]:
    """Request -> the gateway it goes to (0..routers-1)."""
    check_names("routing", (routing,), ROUTINGS)
    rng = random.Random(f"{seed}:{routing}:{routers}")
    if routing == "random":
        return [rng.randrange(routers) for _ in sessions]
    gateway_of: dict[int, int] = {}
    return [gateway_of.setdefault(session, rng.randrange(routers)) for session in sessions]


@dataclass(frozen=True)
class RouterSettings:
    routings: tuple[str, ...] = ROUTINGS
    router_counts: tuple[int, ...] = ROUTER_COUNTS
    capacity_fractions: tuple[float, ...] = (1.0,)

    def __post_init__(self) -> None:
        check_names("routing", self.routings, ROUTINGS)
        check_capacity_fractions(self.capacity_fractions)
        if not self.router_counts or min(self.router_counts) < 1:
            raise ValueError("router counts must be at least 1")


@dataclass(frozen=True)
class RouterRunMetrics:
    """One row: N gateways under one routing policy, at one pool capacity."""

    routing: str
    routers: int
    capacity_fraction: float
    capacity_pages: int
    requests: int
    follow_up_requests: int
    requested_pages: int
    follow_up_pages: int
    sessions_from_trace: bool
    """Whether the trace named its sessions (else they were derived)."""
    shared_hits: int
    shared_hit_rate: float
    shared_follow_up_hit_rate: float
    separate_hits: int
    separate_hit_rate: float
    separate_follow_up_hit_rate: float
    stale_pages: int
    """Separate indexes: pages of a request's leading run its gateway listed but the pool
    had evicted (0 when the pool keeps every page)."""
    shared_index_pages: int
    """Pages the shared index lists at the end (the pool's)."""
    separate_index_pages: int
    """Pages the separate indexes list at the end, summed over gateways."""


@dataclass
class GatewayCounts:
    """What one configuration's separate indexes found over the trace."""

    assignment: Sequence[int]
    """Request -> its gateway."""
    indexes: list[set[int]]
    """Gateway -> the pages its index lists."""
    hits: int = 0
    follow_up_hits: int = 0
    stale: int = 0


@dataclass
class SharedCounts:
    """What the shared index (the pool's) found, and the pool's size at the end."""

    hits: int = 0
    follow_up_hits: int = 0
    pool_pages: int = 0


def replay_gateways(trace: PageTrace, capacity: int, is_follow_up: Sequence[bool],
                    assignments: Sequence[Sequence[int]],
                    served: Callable[[], object] = lambda: None,
                    ) -> tuple[SharedCounts, list[GatewayCounts]]:
    """One pass over the trace: the pool (leaf-first LRU at `capacity` pages) serves every
    request, and each assignment's gateways look the request up in their own indexes
    first (`served` is called after each request: a progress bar's update). Returns the
    shared index's counts and each assignment's."""
    pool = new_replay(trace, "radix", "lru", capacity, TraceSettings())
    cached = pool.cached
    shared = SharedCounts()
    gateways = [GatewayCounts(assignment, [set() for _ in range(max(assignment, default=0) + 1)])
                for assignment in assignments]
    for request, chain in enumerate(trace.chains):
        follow_up = is_follow_up[request]
        found = pool.index.match(chain)[1]
        shared.hits += found
        shared.follow_up_hits += found if follow_up else 0
        for counts in gateways:
            known = counts.indexes[counts.assignment[request]]
            listed = 0
            while listed < len(chain) and chain[listed] in known:
                listed += 1
            usable = 0
            while usable < listed and chain[usable] in cached:
                usable += 1
            counts.hits += usable
            counts.follow_up_hits += usable if follow_up else 0
            counts.stale += listed - usable
            known.update(chain)
        pool.serve(chain)
        served()
    shared.pool_pages = len(cached)
    return shared, gateways


def _rate(hits: int, pages: int) -> float:
    return hits / pages if pages else 0.0


def run_routers(trace: PageTrace, settings: RouterSettings,
                show_progress: bool = True) -> list[RouterRunMetrics]:
    """Every routing and router count at each capacity: one pass over the trace per
    capacity serves the pool and every configuration's gateways."""
    sessions = trace.sessions if trace.sessions is not None else derive_sessions(trace.chains)
    is_follow_up = follow_ups(sessions)
    follow_up_pages = sum(len(chain) for chain, follow_up in zip(trace.chains, is_follow_up)
                          if follow_up)
    configurations = [(routing, routers) for routing in settings.routings
                      for routers in settings.router_counts]
    assignments = [route(sessions, routers, routing) for routing, routers in configurations]
    results = []
    progress = tqdm(total=len(trace.chains) * len(settings.capacity_fractions),
                    desc="sim routers", unit="request", disable=not show_progress)
    for fraction in settings.capacity_fractions:
        capacity = capacity_pages(trace, fraction)
        shared, gateways = replay_gateways(trace, capacity, is_follow_up, assignments,
                                           progress.update)
        for (routing, routers), counts in zip(configurations, gateways):
            results.append(RouterRunMetrics(
                routing=routing,
                routers=routers,
                capacity_fraction=fraction,
                capacity_pages=capacity,
                requests=len(trace.chains),
                follow_up_requests=sum(is_follow_up),
                requested_pages=trace.requested_pages,
                follow_up_pages=follow_up_pages,
                sessions_from_trace=trace.sessions is not None,
                shared_hits=shared.hits,
                shared_hit_rate=_rate(shared.hits, trace.requested_pages),
                shared_follow_up_hit_rate=_rate(shared.follow_up_hits, follow_up_pages),
                separate_hits=counts.hits,
                separate_hit_rate=_rate(counts.hits, trace.requested_pages),
                separate_follow_up_hit_rate=_rate(counts.follow_up_hits, follow_up_pages),
                stale_pages=counts.stale,
                shared_index_pages=shared.pool_pages,
                separate_index_pages=sum(map(len, counts.indexes)),
            ))
    progress.close()
    return results

"""A trace's requests as page chains: dense page numbers with parent links, and the prefix
hashes the service stores them under."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from blake3 import blake3

from mooncake_redis.errors import TraceFormatError
from mooncake_redis.sim.trace.files import TRACE_BLOCK_TOKENS, TraceRequest, iter_trace

NO_PARENT = -1
"""The parent of a request's first page: the root."""


@dataclass(frozen=True)
class PageTrace:
    """Requests as chains of page numbers, root first.

    Pages are numbered 0, 1, ... in order of first appearance, so a page's parent always has
    a smaller number and pages 0..k-1 are a set closed under parents (a valid tree).
    """

    source: str
    chains: list[tuple[int, ...]]
    parents: list[int]
    """Page -> its parent page, NO_PARENT for a first page."""
    block_ids: list[int]
    """Page -> its hash id in the trace."""
    page_tokens: int = TRACE_BLOCK_TOKENS
    sessions: list[int] | None = None
    """Request -> its session, when every request of the trace names one."""

    @property
    def distinct_pages(self) -> int:
        return len(self.parents)

    @property
    def requested_pages(self) -> int:
        return sum(map(len, self.chains))

    @property
    def best_possible_hit_rate(self) -> float:
        """The hit rate of a cache that keeps every page: only a page's first use misses
        (and a page's ancestors were all used before it was, so every later use of it is in
        its chain's cached leading run: per-page and usable-prefix alike)."""
        requested = self.requested_pages
        return (requested - self.distinct_pages) / requested if requested else 0.0


def build_page_trace(requests: Iterable[TraceRequest], source: str,
                     page_tokens: int = TRACE_BLOCK_TOKENS) -> PageTrace:
    """Number the pages and link each to its parent.

    Equal ids mean equal prefixes, so an id must always follow the same id (or always start
    a request); TraceFormatError names the line where one does not."""
    page_of: dict[int, int] = {}
    parents: list[int] = []
    block_ids: list[int] = []
    first_lines: list[int] = []
    chains: list[tuple[int, ...]] = []
    sessions: list[int | None] = []

    def describe(parent: int) -> str:
        return "the start of the request" if parent == NO_PARENT else f"id {block_ids[parent]}"

    for request in requests:
        chain = []
        parent = NO_PARENT
        for position, block_id in enumerate(request.hash_ids):
            page = page_of.get(block_id)
            if page is None:
                page = page_of[block_id] = len(parents)
                parents.append(parent)
                block_ids.append(block_id)
                first_lines.append(request.line)
            elif parents[page] != parent:
                raise TraceFormatError(
                    source, request.line,
                    f"hash_ids[{position}] {block_id} follows {describe(parent)} here but "
                    f"{describe(parents[page])} on line {first_lines[page]}: equal ids must "
                    "have equal prefixes")
            chain.append(page)
            parent = page
        chains.append(tuple(chain))
        sessions.append(request.session)
    named = [session for session in sessions if session is not None]
    return PageTrace(source, chains, parents, block_ids, page_tokens,
                     named if len(named) == len(sessions) else None)


def read_page_trace(path: Path, limit: int | None = None) -> PageTrace:
    """The first `limit` requests (all when None) of a Mooncake JSONL trace, as page chains."""
    return build_page_trace(iter_trace(path, limit), str(path))


@dataclass(frozen=True)
class ServicePages:
    """A page trace and the prefix hash each page is stored under on the service."""

    trace: PageTrace
    hashes: list[str]
    """Page -> its prefix hash (64 hex digits)."""

    def parent_hash(self, page: int) -> str | None:
        parent = self.trace.parents[page]
        return None if parent == NO_PARENT else self.hashes[parent]


def prefix_hashes(trace: PageTrace) -> list[str]:
    """Page -> its prefix hash: the 64-hex blake3 of the ids up to and including it, joined
    by commas (`0,1,2` for the third page of `[0, 1, 2, ...]`), each page hashed once."""
    digests = [""] * trace.distinct_pages  # every page is in a chain, so all get filled
    block_ids = trace.block_ids
    for chain in trace.chains:
        if all(digests[page] for page in chain):
            continue
        hasher = blake3()
        for position, page in enumerate(chain):
            hasher.update(b"%s%d" % (b"," if position else b"", block_ids[page]))
            if not digests[page]:
                digests[page] = hasher.copy().hexdigest()
    return digests


def service_pages(trace: PageTrace) -> ServicePages:
    """A Mooncake trace's pages under the prefix hashes of the trace's README."""
    return ServicePages(trace, prefix_hashes(trace))


def hash_chain_pages(chains: Iterable[Sequence[str]], source: str,
                     page_tokens: int) -> ServicePages:
    """Chains of prefix hashes (each page named by the hash of its whole prefix, as the
    generated workload's are), numbered as a trace's pages are, under their own hashes."""
    ids: dict[str, int] = {}
    requests = (TraceRequest(number, 0.0, 0, 0,
                             tuple(ids.setdefault(page_hash, len(ids)) for page_hash in chain))
                for number, chain in enumerate(chains, start=1))
    trace = build_page_trace(requests, source, page_tokens)
    hash_of_id = list(ids)  # ids are numbered in order of first appearance
    return ServicePages(trace, [hash_of_id[block_id] for block_id in trace.block_ids])

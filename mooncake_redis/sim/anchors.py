"""Published figures the simulator's results are read against, printed beside them.

They come from other systems and other conditions: a reader compares orders of magnitude
and directions with them, not digits."""

from __future__ import annotations

MOONCAKE_TRACE_CACHE_RATIOS = (("conversation", 0.40), ("tool-agent", 0.59), ("synthetic", 0.66))
"""Mooncake (FAST'25), Table 2: the cache ratio of each of its published traces, the share
of a trace's input that earlier requests already computed (what a cache that kept every
block would reuse): the reference for a trace's best possible hit rate."""

SGLANG_SHARE_OF_OPTIMAL = 0.96
"""SGLang's RadixAttention paper: its cache-aware schedule reaches 96 % of the optimal hit
rate on average. Its optimum is over the order a batch of requests is served in (a
depth-first walk of their radix tree is optimal when the cache holds the longest
request), not over eviction in a fixed arrival order as here: the same question, how
close to the best, asked of a different choice."""

SHARED_INDEX_FOLLOW_UP_HIT_RATE = 0.95
SEPARATE_INDEXES_FOLLOW_UP_HIT_RATE = 0.66
"""A public measurement of N gateways: with one shared index the follow-up hit rate held
at 0.95 from 1 to 8 gateways; with an index per gateway it was 0.66."""


def _percent(rate: float) -> str:
    return f"{rate:.0%}"


def optimum_note() -> str:
    return (
        "of optimum: the hit rate over that of Belady's offline optimum at the same "
        "capacity (the most any policy on any index can get; see docs/SIMULATION.md). "
        f"Anchor: SGLang's RadixAttention paper reports {_percent(SGLANG_SHARE_OF_OPTIMAL)} "
        "of optimal for its cache-aware schedule."
    )


def best_possible_note(best_possible: float) -> str:
    """The trace's best possible hit rate (a cache that keeps every page) beside
    Mooncake's cache ratios."""
    ratios = ", ".join(f"{_percent(ratio)} ({name})" for name, ratio in MOONCAKE_TRACE_CACHE_RATIOS)
    return (
        f"Best possible on this trace (every page kept, only first uses miss): "
        f"{best_possible:.2%} of page lookups. Anchor: Mooncake FAST'25 Table 2 cache ratios "
        f"{ratios}."
    )


def routers_note() -> str:
    return (
        "Anchor: a public measurement held the follow-up hit rate at "
        f"{SHARED_INDEX_FOLLOW_UP_HIT_RATE:.2f} from 1 to 8 gateways sharing one index, "
        f"against {SEPARATE_INDEXES_FOLLOW_UP_HIT_RATE:.2f} with an index per gateway."
    )

"""The refusal path of admission: items put_start refused for their shard's limit borrow
limit from the shards with the most spare (limit - used bytes) and are sent again, once.
The common path pays nothing: this runs only after a NO_SPACE refusal.

Three round trips (per node on a cluster), each call one shard: read every shard's used
bytes and limit; take from the donors (lua/lend.lua lowers a limit only by what stays
spare, and answers what it took and the donor's keeper generation); give the sum to the
refused shard, only where its generation is the donor's. Taking before giving keeps the
limits' sum at most capacity_bytes whatever happens between the steps: a borrower that
dies in between leaves that limit unused until the next keeper run gives it back
(admission.rebalance), and the generation check keeps a keeper that read the donor after
the take from giving the same bytes back too (docs/ARCHITECTURE.md, "Capacity and
admission").
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping

from mooncake_redis.context import Context
from mooncake_redis.errors import OutcomeUnknown
from mooncake_redis.executor import raise_first_error
from mooncake_redis.values import to_int

from .admission import lend, read_shards, shard_default_limit

log = logging.getLogger(__name__)


def charged_bytes(size: int, replicas: str) -> int:
    """What an object counts against its shard's limit: its size once per replica (packed
    replicas, values.pack_replicas), as lua/_lib.lua's charged()."""
    return size * max(1, replicas.count("|"))


def borrow(ctx: Context, needs: Mapping[str, int]) -> set[str]:
    """Move limit to each shard of `needs` (shard -> bytes its refused items count) from
    the other shards, those with the most spare first. Returns the shards worth sending
    the items again: those with room now. A shard whose need is more than the spare left
    anywhere gets nothing (its items are refused: they do not fit the free capacity)."""
    if not ctx.settings.capacity_bytes or not needs:
        return set()
    default = shard_default_limit(ctx)
    spare = {s.shard: (default if s.limit is None else s.limit) - s.used_bytes
             for s in read_shards(ctx)}
    donors = sorted((shard for shard in spare if shard not in needs and spare[shard] > 0),
                    key=lambda shard: (-spare[shard], shard))
    missing: dict[str, int] = {}
    plan: list[tuple[str, str, int]] = []
    """(donor, receiver, bytes) to take and give."""
    for receiver in sorted(needs):
        short = needs[receiver] - max(0, spare.get(receiver, 0))
        if short > sum(spare[donor] for donor in donors):
            continue
        missing[receiver] = short
        for donor in donors:
            if short <= 0:
                break
            amount = min(spare[donor], short)
            if amount > 0:
                plan.append((donor, receiver, amount))
                spare[donor] -= amount
                short -= amount
    got = _take_and_give(ctx, plan)
    return {receiver for receiver, short in missing.items() if got[receiver] >= short}


def _take_and_give(ctx: Context, plan: list[tuple[str, str, int]]) -> dict[str, int]:
    """Bytes each receiver was given."""
    got: dict[str, int] = defaultdict(int)
    if not plan:
        return got
    batch = ctx.batch()
    for donor, _, amount in plan:
        lend(batch, ctx, donor, "take", "", amount)
    try:
        replies = batch.execute()
        raise_first_error(replies)
    except OutcomeUnknown as error:  # whatever was taken stays unused until the keeper
        log.warning("borrowing limit: %s", error)
        return got
    gifts: dict[tuple[str, str], int] = defaultdict(int)
    for (_, receiver, _), (taken, generation) in zip(plan, replies):
        if to_int(taken):
            gifts[receiver, str(generation)] += to_int(taken)
    for (receiver, generation), amount in gifts.items():
        lend(batch, ctx, receiver, "give", generation, amount)
    try:
        replies = batch.execute()
        raise_first_error(replies)
    except OutcomeUnknown as error:  # given or not: sending the items again tells
        log.warning("borrowing limit: %s", error)
        return {receiver: amount for (receiver, _), amount in gifts.items()}
    for (receiver, _), given in zip(gifts, replies):
        got[receiver] += to_int(given)
    return got

"""put_start's admission wait: items refused for space (NoSpace) are sent again, and only
they, until they are written or the wait ends, while eviction makes room.

Eviction is asked for once per call (Index.on_no_space: an RQ job when a queue is
configured); without a queue nothing else would evict, so the waiting call runs one
eviction job itself first. Between sends it sleeps, doubling the pause. Sending an item
again is safe: a refused item wrote nothing, and the writer token makes a re-sent
put_start of this client's own key a re-send, not a conflict."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from mooncake_redis.context import Context
from mooncake_redis.errors import MooncakeRedisError, NoSpace
from mooncake_redis.models import Result

from . import registration

log = logging.getLogger(__name__)

FIRST_PAUSE_S = 0.005
MAX_PAUSE_S = 0.2
"""Pauses between sends double from the first to this (the wait's end cuts the last)."""


def refused_for_space(results: list[Result[None]], among: list[int]) -> list[int]:
    return [position for position in among if isinstance(results[position].error, NoSpace)]


def write_waiting(ctx: Context, items: list[registration.Prepared], pins: int, wait_ms: int,
                  mode: str, on_no_space: Callable[[], object] | None,
                  evict: Callable[[], object] | None) -> list[Result[None]]:
    """registration.put, then, while items are refused for space and wait_ms has not
    passed since the first refusal: run `evict` once (the in-process eviction job, when
    no worker would run one), sleep, send the refused items again. on_no_space is called
    once, at the first refusal. mode: lua/put.lua's."""
    results = registration.put(ctx, items, pins, mode)
    if not wait_ms:
        if on_no_space is not None and refused_for_space(results, list(range(len(results)))):
            on_no_space()
        return results
    refused = refused_for_space(results, list(range(len(results))))
    if not refused:
        return results
    if on_no_space is not None:
        on_no_space()
    deadline = time.monotonic() + wait_ms / 1000
    pause = FIRST_PAUSE_S
    while refused and time.monotonic() < deadline:
        if evict is not None:
            evict_once(evict)
            evict = None
        else:
            time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
            pause = min(2 * pause, MAX_PAUSE_S)
        again = registration.put(ctx, [items[position] for position in refused], pins, mode)
        for position, result in zip(refused, again):
            results[position] = result
        refused = refused_for_space(results, refused)
    return results


def evict_once(evict: Callable[[], object]) -> None:
    """Run the eviction job; a failure is logged, and the wait goes on (a worker, or
    another client's removals, may still make room)."""
    try:
        evict()
    except MooncakeRedisError as error:
        log.warning("eviction while waiting for room failed: %s", error)

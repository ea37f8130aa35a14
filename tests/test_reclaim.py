"""The monitor reclaims unfinished puts past put_start_release_timeout_ms at any usage (not
only when an eviction job runs above the high watermark), and only those."""

from __future__ import annotations

import pytest
from clock import wait_for_redis_time
from helpers import assert_consistent, page

from mooncake_redis import Index, InvalidObjectState
from mooncake_redis.store.deletion import delete_objects
from mooncake_redis.workers.monitor import watch


def test_the_monitor_reclaims_expired_unfinished_puts_below_the_watermark(
        index: Index) -> None:
    root, child, done = f"{page('r')}_0_k", f"{page('r-child')}_0_k", f"{page('r-done')}_0_k"
    index.put_start(done, 5)
    index.put_end(done)
    index.put_start(root, 7)  # interior: an eviction job would never take it
    index.put_start(child, 3, parent_block_hash=page("r"))
    assert watch(index.ctx, interval_s=0, iterations=1) == 0
    assert index.usage().objects == 3  # within the release timeout: kept
    index.set_config(put_start_release_timeout_ms=1)  # capacity unlimited: usage 0 %
    wait_for_redis_time(index, index.ctx.redis_time_ms() + 2)
    watch(index.ctx, interval_s=0, iterations=1)
    assert index.object_info(root) is None and index.object_info(child) is None
    assert index.object_info(done) is not None  # complete objects are not the monitor's
    events = [(e.type, e.key) for e in index.events(start="earliest", follow=False)]
    assert sorted(k for t, k in events if t == "revoked") == sorted([root, child])
    assert index.usage().used_bytes == 5
    assert_consistent(index)


def test_a_put_finished_meanwhile_is_not_reclaimed(index: Index) -> None:
    """Reclaiming re-checks in its script: a put_end between the monitor's read and its
    deletion wins (the object is complete, so it is refused)."""
    key = f"{page('finished')}_0_k"
    index.put_start(key, 1)
    index.put_end(key)
    (result,) = delete_objects(index.ctx, [(key, page("finished"), "_0_k")], "reclaim")
    assert isinstance(result.error, InvalidObjectState)
    index.put_start(f"{page('young')}_0_k", 1)
    (young,) = delete_objects(index.ctx, [(f"{page('young')}_0_k", page("young"), "_0_k")],
                              "reclaim")
    assert isinstance(young.error, InvalidObjectState)  # within its release timeout
    assert index.usage().objects == 2


@pytest.mark.parametrize("backend", ["redis"])
def test_a_sweep_covers_the_namespace_page_by_page(index: Index, backend: str) -> None:
    """One SCAN page per primary per check: a namespace larger than a page is swept over
    several checks, each resuming where the last one stopped."""
    from mooncake_redis.operations.reclaim import Reclaimer

    keys = [f"{page(('many', i))}_0_k" for i in range(300)]
    index.batch_put_start([(key, 1) for key in keys])
    index.set_config(put_start_release_timeout_ms=1)
    wait_for_redis_time(index, index.ctx.redis_time_ms() + 2)
    reclaimer = Reclaimer(scan_count=50)
    checks = 0
    while index.usage().objects and checks < 100:
        reclaimer.step(index.ctx)
        checks += 1
    assert index.usage().objects == 0 and checks > 1, checks

"""The namespace's shard count: recorded at creation (16 unless given), 256 for a
namespace stored before the setting existed, fixed afterwards, and what makes a batch
take few script calls a step."""

from __future__ import annotations

import pytest
import redis
from helpers import page

from mooncake_redis import ConfigurationError, Index
from mooncake_redis.executor import load_scripts

PAGES = [page(("batch", i)) for i in range(200)]


def stored_count(index: Index) -> str | None:
    return index.client.hget(index.ctx.schema.settings, "shard_count")


def evalsha_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0))


def test_a_new_namespace_records_16_shards_and_its_keys_use_16_tags(make_index) -> None:
    index: Index = make_index()
    assert stored_count(index) == "16" and index.settings.shard_count == 16
    index.batch_put_start([(f"{h}_0_k", 1) for h in PAGES])
    tags = {key.split(":")[1] for key in index.client.scan_iter(match="t:{*}:*")}
    assert tags <= {f"{{{i:02x}}}" for i in range(16)} and len(tags) == 16


def test_a_count_given_at_creation_is_recorded_and_later_clients_follow_it(make_index) -> None:
    first: Index = make_index(shard_count=64)
    first.put_start(f"{PAGES[0]}_0_k", 1)
    second: Index = make_index()  # given nothing: reads the stored layout
    assert second.settings.shard_count == 64 and stored_count(first) == "64"
    assert second.object_info(f"{PAGES[0]}_0_k") is not None


@pytest.mark.parametrize("value", [0, 3, 512, "many"])
def test_a_shard_count_that_is_no_power_of_two_up_to_256_is_refused(make_index, value) -> None:
    with pytest.raises(ConfigurationError, match="shard_count"):
        make_index(shard_count=value)
    assert make_index(namespace="other").client.exists("t:settings") == 0  # nothing written


def legacy_namespace(make_index) -> Index:  # type: ignore[no-untyped-def]
    """A namespace as a client before the setting wrote it: 256 shards, none recorded."""
    old: Index = make_index(shard_count=256)
    old.put_start(f"{PAGES[0]}_0_k", 1)
    old.put_end(f"{PAGES[0]}_0_k")
    old.client.hdel(old.ctx.schema.settings, "shard_count")
    return old


def test_a_namespace_stored_before_the_setting_keeps_its_256_shards(make_index) -> None:
    legacy_namespace(make_index)
    reader: Index = make_index(read_only=True)
    assert reader.settings.shard_count == 256 and stored_count(reader) is None  # not written
    assert reader.ctx.reload_settings().shard_count == 256  # a re-read keeps the layout
    assert reader.object_info(f"{PAGES[0]}_0_k") is not None
    writer: Index = make_index(shard_count=16)  # asks for 16: the stored layout wins
    assert writer.settings.shard_count == 256 and stored_count(writer) == "256"
    assert writer.object_info(f"{PAGES[0]}_0_k") is not None


def test_the_count_is_fixed_once_created(make_index) -> None:
    index: Index = make_index()
    with pytest.raises(ConfigurationError, match="fixed when a namespace is created"):
        index.set_config(shard_count=32)
    with pytest.raises(ConfigurationError, match="fixed when a namespace is created"):
        index.reset_config("shard_count")
    index.set_config(shard_count=16)  # no change
    assert stored_count(index) == "16"


def test_an_unreadable_count_stops_the_open_with_how_to_mend_it(make_index) -> None:
    index: Index = make_index()
    index.client.hset(index.ctx.schema.settings, "shard_count", "junk")
    with pytest.raises(ConfigurationError, match="HSET t:settings shard_count N"):
        make_index()
    index.client.hset(index.ctx.schema.settings, "shard_count", "16")
    assert make_index().settings.shard_count == 16


@pytest.mark.parametrize("shard_count", [16, 256])
def test_a_200_page_chain_is_one_script_call_on_a_single_redis(
        redis_url: str, shard_count: int) -> None:
    """Calls per Redis node (DESIGN v4): whatever the shard count, a step of a batch is one
    call on a single Redis, each page's link to its parent written in it (no step 1, no
    pending entry); counted by Redis itself."""
    index = Index.from_url(redis_url, namespace="calls", shard_count=shard_count)
    client = redis.Redis.from_url(redis_url)
    load_scripts(index.client, index.ctx.scripts.all)  # no NOSCRIPT re-send is counted
    before = evalsha_calls(client)
    index.batch_put_start([(f"{h}_0_k", 1, PAGES[n - 1] if n else None)
                           for n, h in enumerate(PAGES)])
    assert evalsha_calls(client) - before == 1
    assert len({index.ctx.shard(h) for h in PAGES}) >= min(shard_count, 100)  # many shards
    assert index.match_prefix(PAGES) == 0  # processing: linked, not yet usable
    assert [index.get_node(h).parent for h in PAGES[1:4]] == PAGES[:3]  # type: ignore[union-attr]
    pending = [index.client.zcard(index.ctx.schema.shard_keys(shard).pending)
               for shard in index.ctx.all_shards()]
    assert sum(pending) == 0


def test_fsck_keeps_nodes_that_a_wrong_stored_count_misplaces(make_index) -> None:
    """A planted (valid) shard_count makes every node look misplaced: fsck says so and its
    repair deletes nothing, since the setting, not the data, may be what is wrong."""
    from mooncake_redis.operations.fsck import check

    old: Index = make_index(shard_count=256)
    keys = [f"{h}_0_k" for h in PAGES[:20]]
    old.batch_put_start([(key, 1) for key in keys])
    old.batch_put_end(keys)
    old.client.hset(old.ctx.schema.settings, "shard_count", "16")  # planted
    wrong: Index = make_index()
    found = check(wrong.ctx, repair=True)
    assert found.counts["node_of_another_layout"] > 0 and found.counts["repair_stopped"] == 1
    assert not found.repaired
    old.client.hset(old.ctx.schema.settings, "shard_count", "256")  # mended
    mended: Index = make_index()
    assert all(mended.object_info(key) is not None for key in keys)
    assert check(mended.ctx).clean


def test_a_writing_command_on_a_mistyped_namespace_writes_nothing(redis_url: str) -> None:
    from mooncake_redis.cli.main import main

    assert main(["--url", redis_url, "--namespace", "typo", "fsck", "--repair"]) != 0
    assert redis.Redis.from_url(redis_url).keys("typo:*") == []

"""The namespace's shard layout comes from its keys (DESIGN v4, item 5): a new namespace
gets 16 shards with one-digit tags (or a count asked for at creation, with 0.1's two-digit
tags), 0.1's namespaces keep theirs, and no stored value, lost, planted or changed, moves a
client to another layout; a namespace whose keys cannot tell is read but not written, with
how to mend it. And what a layout no longer costs: a batch is one call per Redis node."""

from __future__ import annotations

import pytest
import redis
from helpers import page

from mooncake_redis import ConfigurationError, Index
from mooncake_redis.executor import load_scripts
from mooncake_redis.keys import KeySchema
from mooncake_redis.prefix import ShardLayout

PAGES = [page(("batch", i)) for i in range(200)]


def stored_count(index: Index) -> str | None:
    return index.client.hget(index.ctx.schema.settings, "shard_count")


def evalsha_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0))


def stored(index: Index, count: int) -> list[str]:
    keys = [f"{h}_0_k" for h in PAGES[:count]]
    index.batch_put_start([(key, 1) for key in keys])
    index.batch_put_end(keys)
    return keys


def test_a_new_namespace_has_16_shards_of_one_digit_tags(make_index) -> None:
    index: Index = make_index()
    assert stored_count(index) == "16" and index.settings.shard_count == 16
    index.batch_put_start([(f"{h}_0_k", 1) for h in PAGES])
    tags = {key.split(":")[1] for key in index.client.scan_iter(match="t:{*}:*")}
    assert tags == {f"{{{digit}}}" for digit in "0123456789abcdef"}


def test_a_count_given_at_creation_is_kept_by_later_clients(make_index) -> None:
    first: Index = make_index(shard_count=64)
    first.put_start(f"{PAGES[0]}_0_k", 1)
    second: Index = make_index()  # given nothing: the keys say 64
    assert second.settings.shard_count == 64 and second.ctx.schema.tag_width == 2
    assert second.object_info(f"{PAGES[0]}_0_k") is not None


@pytest.mark.parametrize("value", [0, 3, 512, "many"])
def test_a_shard_count_that_is_no_power_of_two_up_to_256_is_refused(make_index, value) -> None:
    with pytest.raises(ConfigurationError, match="shard_count"):
        make_index(shard_count=value)
    assert make_index(namespace="other").client.exists("t:settings") == 0  # nothing written


@pytest.mark.parametrize("tamper", ["lost", "planted 256", "planted 16", "junk"])
def test_no_stored_shard_count_moves_a_namespace_to_another_layout(make_index,
                                                                   tamper: str) -> None:
    """What the hostile run found: a 16-shard namespace whose stored count was lost (HDEL,
    a failover right after creation) was read as 256 shards and recorded so for good,
    every object unreachable and re-puts accepted as duplicates; a planted count switched
    running clients within 5 s. Now the keys decide, at open and for good."""
    index: Index = make_index()
    keys = stored(index, 40)
    settings = index.ctx.schema.settings
    if tamper == "lost":
        index.client.hdel(settings, "shard_count")
    else:
        index.client.hset(settings, "shard_count", tamper.split()[-1])
    later: Index = make_index()
    assert later.ctx.schema.layout == index.ctx.schema.layout == ShardLayout(16, 1)
    assert all(later.object_info(key) is not None for key in keys)
    assert not any(r.ok for r in later.batch_put_start([(key, 1) for key in keys]))
    assert index.ctx.reload_settings().shard_count == 16  # a running client too
    assert all(index.object_info(key) is not None for key in keys)


def legacy_namespace(make_index, count: int, pages: int = 40) -> tuple[Index, list[str]]:  # type: ignore[no-untyped-def]
    """A namespace as 0.1 wrote it: two-digit tags, `count` shards, the count stored."""
    client = make_index(namespace="probe").client
    old = Index(client, "t")
    old.ctx.schema = KeySchema("t", ShardLayout(count, 2))  # 0.1's layout, as its writes
    old.ctx._apply_settings(old.ctx.settings)
    keys = stored(old, pages)
    return old, keys


@pytest.mark.parametrize("count", [16, 256])
def test_0_1_namespaces_keep_their_layout_whatever_is_stored(make_index, count: int) -> None:
    old, keys = legacy_namespace(make_index, count)
    old.client.hdel(old.ctx.schema.settings, "shard_count")  # 0.1 before the setting
    reader: Index = make_index(read_only=True)
    assert reader.ctx.schema.layout == ShardLayout(count, 2) and stored_count(reader) is None
    assert all(reader.object_info(key) is not None for key in keys)
    writer: Index = make_index(shard_count=16 if count == 256 else 256)  # asks otherwise
    assert writer.ctx.schema.layout == ShardLayout(count, 2)
    assert stored_count(writer) == str(count)  # recorded, for the record only
    more = [f"{h}_0_k" for h in PAGES[100:110]]
    assert all(r.ok for r in writer.batch_put_start([(key, 1) for key in more]))
    assert all(reader.object_info(key) is not None for key in more)


def test_keys_that_fit_several_layouts_are_read_not_written_until_told(make_index) -> None:
    """0.1's 16 and 256 shards both use tags 00-0f; a namespace so small that no leaf
    tells them apart (every node's hash starts 00) is ambiguous: reads work, writes are
    refused with the way to mend it, and the stored count then settles it."""
    old, _ = legacy_namespace(make_index, 16, pages=0)
    tiny = ["00" + page(("tiny", n))[2:] for n in range(3)]
    keys = [f"{h}_0_k" for h in tiny]
    old.batch_put_start([(key, 1) for key in keys])
    old.batch_put_end(keys)
    old.client.hdel(old.ctx.schema.settings, "shard_count")
    unsure: Index = make_index()
    assert unsure.object_info(keys[0]) is not None
    with pytest.raises(ConfigurationError, match="HSET t:settings shard_count N"):
        unsure.put_start(f"{page('x')}_0_k", 1)
    old.client.hset(old.ctx.schema.settings, "shard_count", "16")
    told: Index = make_index()
    assert told.ctx.schema.layout == ShardLayout(16, 2)
    told.put_start(f"{page('x')}_0_k", 1)


def test_the_count_is_fixed_once_created(make_index) -> None:
    index: Index = make_index()
    with pytest.raises(ConfigurationError, match="fixed when a namespace is created"):
        index.set_config(shard_count=32)
    with pytest.raises(ConfigurationError, match="fixed when a namespace is created"):
        index.reset_config("shard_count")
    index.set_config(shard_count=16)  # no change
    assert stored_count(index) == "16"


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


def test_keys_of_both_layouts_are_kept_and_not_written(make_index) -> None:
    """Node keys of a 0.1 layout in a namespace of this release's (a writer of 0.1 still
    running): writes are refused while both are there, and fsck reports the other
    layout's nodes and deletes nothing, since a writer left data there."""
    from mooncake_redis.operations.fsck import check

    ours: Index = make_index()
    stored(ours, 10)
    old, keys = legacy_namespace(make_index, 256, pages=0)
    old_keys = [f"{page(('old', n))}_0_k" for n in range(5)]
    old.batch_put_start([(key, 1) for key in old_keys])
    mixed: Index = make_index()
    assert mixed.ctx.layout_unknown and "two shard layouts" in mixed.ctx.layout_unknown
    with pytest.raises(ConfigurationError, match="two shard layouts"):
        mixed.put_start(f"{page('y')}_0_k", 1)
    found = check(mixed.ctx, repair=True)
    assert found.counts["node_of_another_layout"] == 5 and not found.repaired
    assert all(old.object_info(key) is not None for key in old_keys)


def test_a_writing_command_on_a_mistyped_namespace_writes_nothing(redis_url: str) -> None:
    from mooncake_redis.cli.main import main

    assert main(["--url", redis_url, "--namespace", "typo", "fsck", "--repair"]) != 0
    assert redis.Redis.from_url(redis_url).keys("typo:*") == []

"""The events consumer (mooncake_redis/store/events.py, docs/EVENTS.md): what the scripts emit,
read back in order per shard; consumer groups ack and redeliver; a consumer killed while
writers write sees every event at least once; a consumer that falls behind the cap is told
which shard lost events, and the shard's listing is what the shard holds; the CLI."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from clock import CHILD_GUARD_S, joined, read_line, wait_until
from conftest import IndexFactory
from helpers import default_shard, page, stream_events

from mooncake_redis import Index
from mooncake_redis.cli.main import main
from mooncake_redis.errors import EventsLost, InvalidArgument
from mooncake_redis.store.events import Event

CONSUMER = Path(__file__).with_name("events_consumer.py")


def pages_in_shard(shard: str, how_many: int) -> list[str]:
    """Page hashes whose node lives in the given shard."""
    found = (page(n) for n in itertools.count())
    return list(itertools.islice((h for h in found if default_shard(h) == shard),
                                 how_many))


def stream_entries(index: Index) -> dict[str, list[tuple[str, dict[str, str]]]]:
    """Every entry of every shard's stream, read straight from Redis."""
    return {shard: entries for shard in index.ctx.all_shards()
            if (entries := index.client.xrange(index.ctx.schema.shard_keys(shard).events))}


def drain(index: Index, group: str | None = None, consumer: str | None = None,
          start: str = "earliest") -> list[Event | EventsLost]:
    return list(index.events(group, consumer, start=start, follow=False, block_ms=10))


def test_put_remove_revoke_evict_emit_their_events_in_order_per_shard(
        make_index: IndexFactory) -> None:
    index = make_index(capacity_bytes=10 ** 9)
    a, b, c = page("a"), page("b"), page("c")
    index.put_start(f"{a}_0_k", 100)
    index.put_end(f"{a}_0_k")
    index.put_start(f"{b}_0_k", 200, parent_block_hash=a)
    index.put_end(f"{b}_0_k")
    index.put_start(f"{b}_1_k", 300, parent_block_hash=a)
    index.put_revoke(f"{b}_1_k")
    index.remove(f"{b}_0_k", force=True)
    index.put_start(f"{c}_0_k", 400, parent_block_hash=a)
    index.put_end(f"{c}_0_k")
    index.evict(target_ratio=0)  # c goes first (a leaf), then a

    items = drain(index)
    assert all(isinstance(item, Event) for item in items)
    events = [item for item in items if isinstance(item, Event)]
    by_shard: dict[str, list[tuple[str, str, int, str | None]]] = {}
    for event in events:
        assert event.key == event.hash + event.suffix
        assert event.shard == index.ctx.shard(event.hash)
        by_shard.setdefault(event.shard, []).append((event.type, event.key, event.size,
                                                     event.parent))
    expected: dict[str, list[tuple[str, str, int, str | None]]] = {}
    for kind, key, size, parent in [
            ("stored", f"{a}_0_k", 100, None), ("stored", f"{b}_0_k", 200, a),
            ("revoked", f"{b}_1_k", 300, a), ("removed", f"{b}_0_k", 200, a),
            ("stored", f"{c}_0_k", 400, a), ("evicted", f"{c}_0_k", 400, a),
            ("evicted", f"{a}_0_k", 100, None)]:  # every type names the node's parent
        expected.setdefault(index.ctx.shard(key[:64]), []).append((kind, key, size, parent))
    assert by_shard == expected
    # the events are the streams' entries, each once, in stream order
    assert {shard: [e.id for e in events if e.shard == shard] for shard in by_shard} == \
        {shard: [entry_id for entry_id, _ in entries]
         for shard, entries in stream_entries(index).items()}


def test_other_fields_are_kept_in_extra(make_index: IndexFactory) -> None:
    index = make_index()
    stream = index.ctx.schema.shard_keys(index.ctx.shard("ab" * 32)).events
    index.client.xadd(stream, {"type": "replaced", "hash": "ab" * 32, "suffix": "_0_k",
                               "size": "7", "replicas": "r1", "reason": "upsert"})
    (event,) = drain(index)
    assert isinstance(event, Event)
    assert (event.type, event.size, event.replicas_raw, event.extra, event.parent) == \
        ("replaced", 7, "r1", {"reason": "upsert"}, None)


def test_a_group_acks_what_it_processed_and_does_not_see_it_again(
        make_index: IndexFactory) -> None:
    index = make_index()
    keys = [f"{page(n)}_0_k" for n in range(20)]
    index.batch_put_start([(key, 10) for key in keys])
    index.batch_put_end(keys)
    consumer = index.events("routers", "r1", start="earliest", follow=False, block_ms=10)
    first = list(consumer)
    assert sorted(e.key for e in first if isinstance(e, Event)) == sorted(keys)
    streams = {index.ctx.schema.shard_keys(e.shard).events for e in first
               if isinstance(e, Event)}
    assert sum(index.client.xpending(s, "routers")["pending"] for s in streams) == 0
    assert drain(index, "routers", "r1") == []  # a restart finds nothing pending or new
    assert drain(index, "routers", "r2") == []  # nor does another consumer of the group
    assert len(drain(index, "audit", "a1")) == 20  # another group sees all of them

    index.put_start(f"{page('new')}_0_k", 10)
    index.put_end(f"{page('new')}_0_k")
    assert [e.key for e in drain(index, "routers", "r2")] == [f"{page('new')}_0_k"]  # type: ignore[union-attr]


def test_unacked_events_come_back_to_the_same_consumer_first(
        make_index: IndexFactory) -> None:
    index = make_index()
    keys = [f"{page(n)}_0_k" for n in range(10)]
    index.batch_put_start([(key, 10) for key in keys])
    index.batch_put_end(keys)
    reader = index.events("g", "c1", start="earliest", follow=False, block_ms=10, count=2)
    read: list[Event] = []
    while len(read) < 10:  # read() without ack(): all of them stay pending
        read += [item for item in reader.read() if isinstance(item, Event)]
    index.put_start(f"{page('late')}_0_k", 10)
    index.put_end(f"{page('late')}_0_k")
    again = drain(index, "g", "c1")  # the restarted consumer: pending first, then new
    assert [e.id for e in again[:10]] == [e.id for e in sorted(read, key=lambda e: (e.shard, e.id))]  # type: ignore[union-attr]
    assert [e.key for e in again[10:]] == [f"{page('late')}_0_k"]  # type: ignore[union-attr]
    assert drain(index, "g", "c1") == []


def test_a_consumer_that_falls_behind_is_told_and_the_listing_is_the_shard(
        make_index: IndexFactory) -> None:
    index = make_index(events_max_len=10)
    group = index.events("slow", "s1", start="latest", follow=False, block_ms=10)
    plain = index.events(start="latest", follow=False, block_ms=10)
    assert list(group) == [] and list(plain) == []  # both start here
    hashes = pages_in_shard("3", 150)
    keys = [f"{h}_0_k" for h in hashes]
    for start in range(0, len(keys), 50):
        index.batch_put_start([(key, 10) for key in keys[start:start + 50]])
    for key in keys:  # an entry per call: 150 in shard 03, far over the cap of 10
        index.put_end(key)
    index.batch_remove(keys[:40], force=True)  # one entry of 40 events
    added = index.client.xinfo_stream(index.ctx.schema.shard_keys("3").events)["entries-added"]
    kept = index.client.xlen(index.ctx.schema.shard_keys("3").events)
    assert kept < added == 151  # the cap counts entries, not events
    kept_events = len(stream_events(index, "3"))
    assert kept_events == kept - 1 + 40

    for reader in (group, plain):
        items = list(reader)
        lost = [item for item in items if isinstance(item, EventsLost)]
        events = [item for item in items if isinstance(item, Event)]
        assert [(m.shard, m.count) for m in lost] == [("3", added - kept)]  # entries
        assert items[0] is lost[0]  # the marker comes before the shard's events
        assert len(events) == kept_events and {e.shard for e in events} == {"3"}
        assert list(reader) == []  # reported once: the count starts again after it

    # behind again, after reading: the count went on from the right base
    more = [f"{h}_1_k" for h in hashes]
    for start in range(0, len(more), 50):
        index.batch_put_start([(key, 10) for key in more[start:start + 50]])
    for key in more[:30]:
        index.put_end(key)
    index.batch_put_end(more[30:])
    info = index.client.xinfo_stream(index.ctx.schema.shard_keys("3").events)
    for reader in (group, plain):
        lost = [item for item in reader if isinstance(item, EventsLost)]
        assert [(m.shard, m.count) for m in lost] == [
            ("3", info["entries-added"] - info["length"] - added)]
    keys += more

    listing = list(group.list_shard("3"))
    assert sorted(o.key for o in listing) == sorted(keys[40:])
    assert {(o.size, o.state, o.parent) for o in listing} == {(10, "complete", None)}
    assert all(o.key == o.hash + o.suffix for o in listing)
    assert list(group.list_shard("d")) == []


def test_a_consumer_killed_while_writers_write_sees_every_event_at_least_once(
        redis_url: str, tmp_path: Path) -> None:
    index = Index.from_url(redis_url, namespace="kill", events_max_len=1_000_000)
    out = tmp_path / "seen.txt"
    stop = threading.Event()

    def write(writer: int) -> None:
        index = Index.from_url(redis_url, namespace="kill")  # one client per thread
        for n in itertools.count():
            if stop.is_set() and n > 200:
                return
            key = f"{page((writer, n))}_0_k"
            index.put_start(key, 10)
            index.put_end(key)
            if n % 3 == 0:
                index.remove(key, force=True)

    def consumer(mode: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, str(CONSUMER), redis_url, "kill", "g", "c1",
                                 str(out), mode])

    def lines_seen() -> int:
        return len(out.read_text().splitlines()) if out.exists() else 0

    writers = [threading.Thread(target=write, args=(w,)) for w in range(3)]
    for thread in writers:
        thread.start()
    try:
        for _ in range(3):  # killed three times while it reads
            process = consumer("follow")
            lines_before = lines_seen()

            def read_50_more(process: subprocess.Popen[bytes] = process,
                             lines_before: int = lines_before) -> bool:
                assert process.poll() is None, "the consumer exited"
                return lines_seen() >= lines_before + 50

            wait_until(read_50_more, "the consumer to record 50 more events")
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=CHILD_GUARD_S)
    finally:
        stop.set()
        for thread in writers:
            joined(thread, "a writer to stop")
    assert consumer("drain").wait(timeout=120) == 0

    seen = out.read_text().splitlines()
    assert not [line for line in seen if line.startswith("lost")]
    written = {(shard, entry_id) for shard, entries in stream_entries(index).items()
               for entry_id, _ in entries}
    assert len(written) > 600
    assert {tuple(line.split()) for line in seen} == written
    assert len(seen) >= len(written)  # at least once: a kill may repeat a few


def test_the_cli_prints_json_lines_that_parse(redis_url: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    index = Index.from_url(redis_url, namespace="cli")
    keys = [f"{page(n)}_0_k" for n in range(5)]
    index.batch_put_start([(key, 10) for key in keys])
    index.batch_put_end(keys)
    index.remove(keys[0])
    common = ["--url", redis_url, "--namespace", "cli", "events"]
    assert main([*common, "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((d["type"], d["key"], d["size"]) for d in lines) == sorted(
        [("stored", key, 10) for key in keys] + [("removed", keys[0], 10)])
    assert {(d["shard"], d["id"]) for d in lines} == {
        (shard, entry_id) for shard, entries in stream_entries(index).items()
        for entry_id, _ in entries}

    assert main([*common]) == 0
    text = capsys.readouterr().out.splitlines()
    assert len(text) == 6 and all(f" {key} size=10 parent=-" in "\n".join(text)
                                  for key in keys)
    assert main([*common, "--consumer", "c1"]) == 2
    assert "--consumer names a consumer of a --group" in capsys.readouterr().err


def test_the_cli_follows_until_sigterm_and_exits_0(redis_url: str) -> None:
    index = Index.from_url(redis_url, namespace="follow")
    process = subprocess.Popen(
        [sys.executable, "-m", "mooncake_redis", "--url", redis_url, "--namespace", "follow",
         "events", "--follow", "--json", "--group", "tail", "--block-ms", "100"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    # the group exists once the follower has made it; only then are new events its own
    stream = index.ctx.schema.shard_keys(index.ctx.shard(page(0))).events

    def group_made() -> bool:
        assert process.poll() is None, "the follower exited"
        return bool(index.client.exists(stream) and index.client.xinfo_groups(stream))

    wait_until(group_made, "the follower to make its group")
    key = f"{page(0)}_0_k"
    index.put_start(key, 10)
    index.put_end(key)
    line = json.loads(read_line(process.stdout, "the follower to print the event"))
    assert (line["type"], line["key"]) == ("stored", key)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert index.client.xpending(stream, "tail")["pending"] == 0  # acked on the way out
    # started before the namespace's first write: it said so, and followed all the same
    assert err == ("warning: namespace 'follow' holds nothing yet (no settings, segments or "
                   "shard stats): following it all the same\n")


def test_bad_arguments_are_refused_before_anything_is_read(make_index: IndexFactory) -> None:
    index = make_index()
    for arguments in [{"start": "now"}, {"count": 0}, {"block_ms": -1},
                      {"consumer": "c"}]:
        with pytest.raises(InvalidArgument):
            index.events(**arguments)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="one of the namespace.s 16 shards"):
        list(index.events().list_shard("zz"))


def test_an_idle_follower_waits_as_long_as_the_caller_iterates(redis_url: str) -> None:
    """With the defaults (follow, block_ms 5000) on a client whose socket timeout (0.5 s)
    is shorter than the block: the consumer outlives many socket timeouts of no traffic
    and still gets the event that finally comes. It waits on Redis's own count of XREAD
    calls (state), not on a window of time; the deadline is only a hang guard."""
    index = Index.from_url(f"{redis_url}?socket_timeout=0.5", namespace="idle")
    stats = Index.from_url(redis_url, namespace="idle").client

    def xreads() -> int:
        return int(stats.info("commandstats").get("cmdstat_xread", {}).get("calls", 0))

    got: list[object] = []
    failed: list[BaseException] = []

    def follow() -> None:
        try:
            for item in index.events():
                got.append(item)
                return
        except BaseException as error:  # noqa: BLE001 - the test reports it
            failed.append(error)

    before = xreads()
    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    wait_until(lambda: xreads() - before >= 12 or not follower.is_alive(),
               "12 idle XREADs of the follower", deadline_s=120)
    assert follower.is_alive() and not failed, failed  # 12 idle reads later, still there
    key = f"{page('idle')}_0_k"
    index.put_start(key, 1)
    index.put_end(key)
    follower.join(timeout=120)
    assert not follower.is_alive() and not failed, failed
    assert [(e.type, e.key) for e in got] == [("stored", key)]  # type: ignore[attr-defined]

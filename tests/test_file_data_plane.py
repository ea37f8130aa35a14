"""examples/file_data_plane.py and the FileByteStore / FileDataPlane it runs on: after a run
under capacity pressure, the bytes on disk are the bytes the store counts on the segment,
every stored object's file exists and every file belongs to a stored object (checked
here from Redis's node hashes and the directory, not from the example's own report);
an unmount deletes every file through the invalidated events; an upsert's old file
outlives the old read lease and no more."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from clock import HANG_GUARD_S, wait_until
from conftest import IndexFactory

from mooncake_redis import Index
from mooncake_redis.capacity.admission import eviction_lock
from mooncake_redis.capacity.eviction import LOCK_HELD, ROUND_LIMIT, TARGET_REACHED, EvictionReport
from mooncake_redis.errors import InvalidArgument
from mooncake_redis.files.byte_store import FileByteStore
from mooncake_redis.files.data_plane import FileDataPlane, Page
from mooncake_redis.tree.matching import scan_node_keys
from mooncake_redis.values import decode_object, split_node

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "file_data_plane.py"
_spec = importlib.util.spec_from_file_location("file_data_plane", EXAMPLE)
assert _spec and _spec.loader
example = importlib.util.module_from_spec(_spec)
sys.modules["file_data_plane"] = example  # dataclasses look their module up there
_spec.loader.exec_module(example)

SEGMENT = "disk0"
PAGE_BYTES = 256
CAPACITY = 128 * PAGE_BYTES * 4  # 512 pages; a run writes about 480 + 2 distinct ones


def stored_locations(index: Index) -> dict[str, int]:
    """file name -> object size, for every replica on SEGMENT, read from the node hashes."""
    locations = {}
    for page in scan_node_keys(index.ctx):
        for node_key in page:
            node = split_node(index.client.hgetall(node_key))
            for value in node.objects.values():
                stored = decode_object(value)
                assert stored is not None
                for replica in stored.replicas:
                    assert replica.segment == SEGMENT
                    locations[replica.location] = stored.size
    return locations


def files_on_disk(directory: Path) -> dict[str, int]:
    return {entry.name: entry.stat().st_size for entry in os.scandir(directory)}


def assert_disk_matches_store(index: Index, directory: Path) -> dict[str, int]:
    files = files_on_disk(directory)
    assert files == stored_locations(index)  # every object's file, and no other file
    assert sum(files.values()) == index.usage().segments[SEGMENT].used_bytes
    return files


@pytest.fixture
def plane(make_index: IndexFactory, tmp_path: Path) -> FileDataPlane:
    index = make_index("files", lease_ttl_ms=10, events_max_len=100_000)
    return FileDataPlane(index, FileByteStore(tmp_path / "segment", SEGMENT), CAPACITY)


# Not on fakeredis: the same scripts, 23 s there (4 s on Redis) for nothing more to see;
# this module's other tests hold it to the contract.
@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_a_run_under_capacity_pressure_leaves_disk_and_store_equal(plane: FileDataPlane
                                                                   ) -> None:
    report = example.run(plane, conversations=120, pages=6, page_bytes=PAGE_BYTES, upserts=4)
    files = assert_disk_matches_store(plane.index, plane.store.directory)
    distinct = 120 * (6 - example.SHARED_PAGES) + example.SHARED_PAGES
    assert report.files_deleted > 0 and len(files) < distinct  # eviction ran and freed files
    assert report.files_deleted == plane.deleted_files
    assert report.pages_read > 0 and report.read_mismatches == 0
    assert report.upserts == 4
    assert report.consistent
    assert report.bytes_on_disk == sum(files.values())


def test_unmounting_the_segment_deletes_every_file(plane: FileDataPlane) -> None:
    example.run(plane, conversations=30, pages=4, page_bytes=PAGE_BYTES, upserts=0)
    assert files_on_disk(plane.store.directory)
    report = plane.index.unmount_segment(SEGMENT)
    assert report.done and report.deleted > 0
    released = plane.release()
    assert released.deleted == report.deleted
    assert files_on_disk(plane.store.directory) == {}
    assert plane.index.usage().objects == 0 and stored_locations(plane.index) == {}


def test_a_refused_page_leaves_no_file(plane: FileDataPlane) -> None:
    page = Page("ab" * 32, b"x" * PAGE_BYTES)
    assert plane.put([page]) == [True]
    assert plane.put([page]) == [True]  # stored already: the second copy's file goes
    plane.index.unmount_segment(SEGMENT)
    plane.release()
    assert plane.put([Page("cd" * 32, b"y" * PAGE_BYTES)]) == [False]  # not mounted
    assert files_on_disk(plane.store.directory) == {}


def test_an_upserts_old_file_waits_for_the_old_read_lease(make_index: IndexFactory,
                                                         tmp_path: Path) -> None:
    index = make_index("files", lease_ttl_ms=60_000)
    plane = FileDataPlane(index, FileByteStore(tmp_path, SEGMENT), CAPACITY)
    key = "ef" * 32
    plane.put([Page(key, b"old" * 10)])
    old = plane.replicas([key])[0]  # a reader holds a lease on the old bytes now
    assert old is not None
    new = plane.store.write(key, b"new" * 10)
    index.upsert_start(key, 30, replicas=[new])
    index.upsert_end(key)
    plane.release()
    assert plane.store.read(old) == b"old" * 10  # still readable under the old lease
    (event,) = plane.waiting
    free_after = int(event.extra["free_after"])
    assert free_after >= index.object_info(key).lease_ms - 60_000  # the old lease's end
    released = plane.store.release(plane.waiting, free_after + 1)
    assert released.deleted == 1 and not released.waiting
    assert files_on_disk(tmp_path) == {new.location: 30}
    assert plane.get([key]) == [b"new" * 10]


def test_locations_outside_the_directory_are_refused(tmp_path: Path) -> None:
    store = FileByteStore(tmp_path / "segment", SEGMENT)
    (tmp_path / "secret").write_text("keep")
    for location in ("../secret", "/etc/passwd", "secret", ".."):
        with pytest.raises(Exception, match="not a file name this store writes"):
            store.delete(location)
    assert (tmp_path / "secret").read_text() == "keep"


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True,
                          text=True, timeout=300)


def test_the_example_runs_on_real_redis(redis_url: str, tmp_path: Path) -> None:
    args = ["--url", redis_url, "--directory", str(tmp_path / "d"), "--segment", SEGMENT,
            "--capacity",
            str(CAPACITY), "--page-bytes", str(PAGE_BYTES), "--conversations", "150",
            "--pages", "4"]
    result = run_example(*args, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    index = Index.from_url(redis_url, "files")
    files = assert_disk_matches_store(index, tmp_path / "d")
    assert report["consistent"] and report["files_deleted"] > 0
    assert report["bytes_on_disk"] == sum(files.values()) == report["segment_used_bytes"]
    again = run_example(*args)  # the namespace is in use now: refused, nothing written
    assert again.returncode == 1 and "use a fresh namespace" in again.stderr
    assert files_on_disk(tmp_path / "d") == files


def test_the_example_says_how_to_use_it() -> None:
    result = run_example("--help")
    assert result.returncode == 0 and "--capacity" in result.stdout
    bad = run_example("--pages", "0")
    assert bad.returncode == 2 and "below the minimum 1" in bad.stderr


def test_a_put_refused_before_anything_is_sent_leaves_no_file(plane: FileDataPlane) -> None:
    with pytest.raises(InvalidArgument):
        plane.put([Page("ab" * 32, b"x"), Page("", b"y")])  # an empty key: a caller error
    assert files_on_disk(plane.store.directory) == {}
    assert plane.index.usage().objects == 0


def test_lost_events_are_made_up_for_from_the_shards_listing(make_index: IndexFactory,
                                                             tmp_path: Path) -> None:
    index = make_index("files", lease_ttl_ms=0, events_max_len=5)
    plane = FileDataPlane(index, FileByteStore(tmp_path, SEGMENT), 1 << 30,
                          resync_min_age_s=0)
    plane.release()  # the group exists from here: what it misses now is lost to it
    keys = [f"ab{n:062x}" for n in range(300)]  # one shard: its stream overflows
    assert all(plane.put([Page(key, b"z" * 8) for key in keys]))
    keep = Page("cd" * 32, b"kept")
    assert plane.put([keep]) == [True]
    while index.evict(0).stopped == ROUND_LIMIT:  # a worker evicts everything
        pass
    plane.put([keep])  # stored again (the eviction took it too)
    released = plane.release()
    assert released.deleted == 301  # shard ab's files by its listing, cd's by its events
    files = files_on_disk(tmp_path)
    assert list(files.values()) == [4] and files == {
        r.location: 4 for r in plane.replicas([keep.key]) if r}


@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_files_a_resync_spared_are_collected_by_a_later_pass(make_index: IndexFactory,
                                                             tmp_path: Path) -> None:
    """Issue 34 item 3a: eviction's events lost (trimmed from the stream, as the cap does
    at maxmemory), the resync spares the files younger than its grace; a later release()
    takes them once they are old enough (the plane's clock moved on: no waiting), and the
    temporary file of a cut write; a file named by an object meanwhile stays. After every
    pass each object the index holds still has its file."""
    index = make_index("files", lease_ttl_ms=0)
    now = [time.time()]
    plane = FileDataPlane(index, FileByteStore(tmp_path, SEGMENT), 300 * 8 * 2,
                          evict_inline=False, clock=lambda: now[0])
    plane.release()  # the group exists from here: what it misses now is lost to it
    pages = [Page(f"ab{n:062x}", b"z" * 8) for n in range(300)]  # one shard
    assert all(plane.put(pages))
    cut = plane.store.write(f"ab{300:062x}", b"cut")  # a write cut before its rename
    os.rename(tmp_path / cut.location, tmp_path / f".{cut.location}.tmp")
    late = plane.store.write(f"ab{301:062x}", b"late")  # its put still under way
    assert plane.release().deleted == 0  # the puts' events
    while index.evict(0.2).stopped == ROUND_LIMIT:
        pass
    shard = index.schema.shard(pages[0].key[:64])
    events = index.schema.shard_keys(shard).events  # evictions' events, all but the last
    last = index.client.xrevrange(events, count=1)[0][1]["objects"]
    index.client.xtrim(events, maxlen=1, approximate=False)
    freed_by_event = last.count("|" + SEGMENT + ",")
    evicted = 300 - index.usage().objects
    assert evicted > 150

    def on_disk_and_registered() -> tuple[set[str], set[str]]:
        stored = set(stored_locations(index))
        disk = set(files_on_disk(tmp_path))
        assert stored <= disk  # nothing the index holds was deleted
        return disk, stored

    first = plane.release()
    disk, stored = on_disk_and_registered()
    assert first.deleted == freed_by_event
    spared = disk - stored  # evicted pages' (their events lost), the cut and late writes
    assert len(spared) == evicted - freed_by_event + 2 and first.spared >= len(spared)
    assert index.batch_put([(f"ab{301:062x}", 4, None, [late])])[0].ok
    now[0] += 59  # still within the grace
    assert plane.release().deleted == 0
    now[0] += 2  # past it
    later = plane.release()
    disk, stored = on_disk_and_registered()
    assert disk == stored and late.location in stored
    assert later.deleted == len(spared) - 1 and later.spared == 0
    assert plane.due == {}


def test_an_eviction_that_meets_another_job_waits_for_it_and_runs(plane: FileDataPlane
                                                                   ) -> None:
    """plane.evict is the make-room step of a put refused for space: when another job (a
    keeper's, a worker's) holds the lock, it waits for that job to end and runs its own,
    instead of returning at once with nothing freed (a put then failed beside a job)."""
    pages = [Page(f"{n:02x}" * 32, b"x" * PAGE_BYTES) for n in range(8)]
    assert plane.put(pages) == [True] * 8
    ctx = plane.index.ctx
    assert eviction_lock(ctx, "acquire", "another-job")
    jobs: list[str] = []
    evict = plane.index.evict

    def job(target_ratio: float | None = None) -> EvictionReport:
        report = evict(target_ratio)
        jobs.append(report.stopped)
        return report

    plane.index.evict = job  # type: ignore[method-assign]
    done = threading.Thread(target=plane.evict, args=(0,))
    done.start()
    wait_until(lambda: jobs, "the plane's first job to find the lock held")
    assert jobs == [LOCK_HELD] and done.is_alive()  # it waits for the other job to end
    assert plane.index.usage().objects == 8  # nothing can go while the other job holds it
    assert eviction_lock(ctx, "release", "another-job")
    done.join(timeout=HANG_GUARD_S)
    assert not done.is_alive()
    assert jobs == [LOCK_HELD, TARGET_REACHED]  # then it ran its own
    assert plane.index.usage().objects == 0 and files_on_disk(plane.store.directory) == {}


@pytest.mark.parametrize("backend", ["redis"])
def test_a_chain_of_pages_is_stored_with_one_script_call(plane: FileDataPlane) -> None:
    """DESIGN v4 item 3: the bytes are on disk before the metadata, so the one-phase put
    records a whole chain (parents, replicas, events) in one call on a single Redis; no
    object is ever processing."""
    client = plane.index.client
    chain = [Page(f"{n:064x}_0_k", b"x" * 100, f"{n - 1:064x}" if n else None)
             for n in range(1, 17)]
    plane.put(chain[:1])  # scripts loaded, settings read
    client.config_resetstat()
    assert plane.put(chain[1:]) == [True] * 15
    calls = client.info("commandstats")
    assert calls["cmdstat_evalsha"]["calls"] == 1
    assert "cmdstat_eval" not in calls
    for page in chain:
        (info,) = plane.index.batch_get([page.key])
        assert info.value is not None and info.value.state == "complete"
    assert plane.index.match_prefix([page.key[:64] for page in chain]) == 16

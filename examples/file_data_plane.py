"""A tiny data plane end to end: page bytes in files, their metadata in mooncake-redis.

The "segment" is a directory. The data plane mounts it with a capacity, serves
conversations page by page (each page's bytes go to a file of their own, then put_start
records the page under its parent with a replica naming that file, then put_end), reads
earlier conversations back (match_prefix, get_replica_desc, open the file, compare the
bytes), replaces a few pages (upsert: the old file is deleted once no read lease can
still need it), and deletes the files of every object the store lets go, as its events
arrive. The capacity is smaller than what is written, so eviction runs all along. At the
end it prints the bytes on disk and the bytes the store counts on the segment: they must
be equal, and every file must belong to a stored object (exit 1 otherwise).

    python examples/file_data_plane.py                       # in process (memory://)
    python examples/file_data_plane.py --url redis://localhost:6379/0 --namespace files
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mooncake_redis import Index
from mooncake_redis.cli.support import (
    FINDING,
    OK,
    add_json_option,
    at_least,
    fail,
    print_json,
    redis_url,
)
from mooncake_redis.files.byte_store import FileByteStore
from mooncake_redis.files.data_plane import FileDataPlane, Page

SHARED_PAGES = 2
"""Every conversation starts with the same system prompt: this many pages of it."""


@dataclass
class Report:
    pages_written: int = 0
    pages_refused: int = 0
    pages_read: int = 0
    """Pages read back and compared."""
    read_mismatches: int = 0
    upserts: int = 0
    files_deleted: int = 0
    bytes_deleted: int = 0
    files: int = 0
    bytes_on_disk: int = 0
    objects: int = 0
    segment_used_bytes: int = 0
    orphan_files: list[str] = field(default_factory=list)
    """Files no stored object names (should be none)."""
    missing_files: list[str] = field(default_factory=list)
    """Stored objects whose file is gone (should be none)."""

    @property
    def consistent(self) -> bool:
        return (self.bytes_on_disk == self.segment_used_bytes and not self.orphan_files
                and not self.missing_files and not self.read_mismatches)


def page_hash(seed: int, conversation: int, page: int) -> str:
    if page < SHARED_PAGES:
        conversation = -1
    return hashlib.sha256(f"{seed}:{conversation}:{page}".encode()).hexdigest()


def payload(key: str, size: int) -> bytes:
    """A page's bytes, made from its key, so a read can be checked."""
    block = hashlib.blake2b(key.encode()).digest()
    return (block * (size // len(block) + 1))[:size]


def run(plane: FileDataPlane, *, conversations: int, pages: int, page_bytes: int,
        upserts: int, seed: int = 0) -> Report:
    """Serve the conversations through the data plane, replace `upserts` pages, evict to
    the watermark's target, apply every event, and compare disk and store."""
    index, store = plane.index, plane.store
    report = Report()
    chains = []
    for number in range(conversations):
        chain = [page_hash(seed, number, page) for page in range(pages)]
        chains.append(chain)
        batch = [Page(key, payload(key, page_bytes), chain[i - 1] if i else None)
                 for i, key in enumerate(chain)]
        stored = plane.put(batch)
        report.pages_written += len(batch)
        report.pages_refused += stored.count(False)
        earlier = chains[number // 2]  # read back an older conversation, as a new turn would
        for key, data in zip(earlier, plane.get(earlier[:plane.leading(earlier)])):
            report.pages_read += 1
            report.read_mismatches += data != payload(key, page_bytes)
        if number % 10 == 9:  # apply what a worker's eviction freed (plane.put's own
            plane.release()   # evictions are applied at once)
    for key in [chain[-1] for chain in chains][-upserts:] if upserts else []:
        if index.is_exist(key):  # rewrite the page: new bytes in a new file
            replica = store.write(key, payload(key[::-1], page_bytes))
            index.upsert_start(key, page_bytes, replicas=[replica])
            index.upsert_end(key)
            report.upserts += 1
    plane.evict()
    while plane.waiting:  # replaced files wait for the old read leases to end
        time.sleep(index.settings.lease_ttl_ms / 1000)
        plane.release()
    report.files_deleted, report.bytes_deleted = plane.deleted_files, plane.deleted_bytes
    _tally(plane, report)
    return report


def _tally(plane: FileDataPlane, report: Report) -> None:
    index, store = plane.index, plane.store
    files = store.files()
    report.files, report.bytes_on_disk = len(files), sum(files.values())
    segment = index.usage().segments.get(store.segment)
    report.segment_used_bytes = segment.used_bytes if segment else 0
    named = set()
    for shard in index.schema.shards:  # every stored object, shard by shard
        for stored in plane.events.list_shard(shard):
            for replica in stored.replicas:
                if store.is_ours(replica):
                    named.add(replica.location)
                    report.objects += 1
    report.orphan_files = sorted(set(files) - named)
    report.missing_files = sorted(named - set(files))


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="file_data_plane.py",
        description="A data plane whose segment is a directory of files, with its metadata, "
                    "prefix tree and eviction in mooncake-redis; ends by comparing the bytes "
                    "on disk with the bytes the store counts (exit 1 if they differ).")
    parser.add_argument("--url", type=redis_url, default="memory://file-data-plane",
                        help="Redis URL (default: the in-process store)")
    parser.add_argument("--namespace", default="files",
                        help="namespace to write into; must hold nothing yet (default: files)")
    parser.add_argument("--directory", type=Path,
                        help="the segment's directory (default: a new temporary one)")
    parser.add_argument("--segment", default="files", help="segment name (default: files)")
    parser.add_argument("--capacity", type=at_least(1), default=1 << 20,
                        help="segment capacity in bytes (default: 1 MiB)")
    parser.add_argument("--conversations", type=at_least(1), default=200,
                        help="conversations to serve (default: 200)")
    parser.add_argument("--pages", type=at_least(1), default=8,
                        help="pages per conversation (default: 8)")
    parser.add_argument("--page-bytes", type=at_least(1), default=1024,
                        help="bytes per page (default: 1024)")
    parser.add_argument("--upserts", type=at_least(0), default=5,
                        help="pages to replace at the end (default: 5)")
    parser.add_argument("--lease-ms", type=at_least(0), default=20,
                        help="lease_ttl_ms of a new namespace (default: 20)")
    add_json_option(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        index = Index.from_url(args.url, args.namespace, lease_ttl_ms=args.lease_ms,
                               events_max_len=100_000)
        if index.usage().objects or args.segment in index.usage().segments:
            return fail(f"namespace {args.namespace} holds objects or segment {args.segment} "
                        "already: use a fresh namespace", args.url)
        directory = args.directory or Path(tempfile.mkdtemp(prefix="file-data-plane-"))
        if directory.exists() and any(directory.iterdir()):
            return fail(f"directory {directory} is not empty: use a fresh one", args.url)
        plane = FileDataPlane(index, FileByteStore(directory, args.segment), args.capacity)
        report = run(plane, conversations=args.conversations, pages=args.pages,
                     page_bytes=args.page_bytes, upserts=args.upserts)
    except Exception as error:  # noqa: BLE001  # one error line, URL passwords masked
        return fail(f"{type(error).__name__}: {error}", args.url)
    if args.json:
        print_json({**vars(report), "directory": str(directory),
                    "consistent": report.consistent})
    else:
        print(f"directory {directory}, segment {args.segment} of {args.capacity} bytes")
        print(f"pages: {report.pages_written} written, {report.pages_refused} refused, "
              f"{report.pages_read} read back ({report.read_mismatches} mismatched), "
              f"{report.upserts} replaced")
        print(f"files deleted on events: {report.files_deleted} ({report.bytes_deleted} bytes)")
        print(f"bytes on disk:        {report.bytes_on_disk} in {report.files} files")
        print(f"bytes in the store:   {report.segment_used_bytes} "
              f"(usage().segments[{args.segment!r}].used_bytes, {report.objects} objects)")
        print(f"orphan files: {len(report.orphan_files)}, objects without a file: "
              f"{len(report.missing_files)}")
    return OK if report.consistent else FINDING


if __name__ == "__main__":
    sys.exit(main())

"""Where each segment's bytes are: a directory per segment under one data root that every
store of the namespace shares (a local directory for the stores of one machine, a shared
filesystem across machines), one FileByteStore per directory.

A segment name comes back from Redis inside every replica; it only ever names a
directory directly under the root (percent-encoded, behind a fixed prefix, so neither
"/" nor ".." can reach outside), and FileByteStore accepts only its own file names in it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Collection
from pathlib import Path
from urllib.parse import quote, unquote

from mooncake_redis.files.byte_store import FileByteStore, Released

DIRECTORY_PREFIX = "segment-"


class SegmentFiles:
    """The file stores of a namespace's segments under one root."""

    def __init__(self, root: Path):
        self.root = root
        self._stores: dict[str, FileByteStore] = {}
        self._lock = threading.Lock()

    def directory(self, segment: str) -> Path:
        return self.root / (DIRECTORY_PREFIX + quote(segment, safe=""))

    def own(self, segment: str) -> FileByteStore:
        """This store's segment: its directory is created."""
        store = FileByteStore(self.directory(segment), segment)
        with self._lock:
            self._stores[segment] = store
        return store

    def reach(self, segment: str) -> FileByteStore | None:
        """Another store's segment, if its directory is there (its owner created it, on a
        filesystem this process sees); None otherwise."""
        with self._lock:
            store = self._stores.get(segment)
        if store is not None:
            return store
        if not self.directory(segment).is_dir():
            return None
        store = FileByteStore(self.directory(segment), segment)
        with self._lock:
            return self._stores.setdefault(segment, store)

    def forget(self, segment: str) -> None:
        with self._lock:
            self._stores.pop(segment, None)

    def collect_dead(self, registered: Collection[str], grace_s: float, now: float
                     ) -> Released:
        """Collect the directories of segments that are not registered (their owners died
        and the segments were unmounted for them, or they ended without close()): every
        file and temporary file older than grace_s at `now` (no stored object names a
        replica on a segment that is not mounted; a younger file may be a put's that
        its writer is still to see refused, and delete), then the directory itself once
        it is empty and nothing was added to or taken from it for grace_s (a store that
        is setting up makes its directory before it mounts the segment)."""
        total = Released()
        oldest = now - grace_s
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.root):
                if not entry.name.startswith(DIRECTORY_PREFIX) or not entry.is_dir():
                    continue
                segment = unquote(entry.name[len(DIRECTORY_PREFIX):])
                if segment in registered:
                    continue
                store = FileByteStore(entry.path, segment)
                released = store.collect(lambda key: True, (), grace_s, now)
                total.deleted += released.deleted
                total.bytes += released.bytes
                total.spared += released.spared
                with contextlib.suppress(OSError):  # a file in it (a write under way), or gone
                    if entry.stat().st_mtime <= oldest:
                        store.directory.rmdir()
                        self.forget(segment)
        return total


def remove_files(store: FileByteStore) -> None:
    """Delete every file of a store, then its directory if nothing else is in it."""
    with contextlib.suppress(FileNotFoundError):  # the directory is gone already
        for name in store.files():
            store.delete(name)
    with contextlib.suppress(OSError):  # another file in it (a write under way): keep it
        store.directory.rmdir()

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
import time
from collections.abc import Collection
from pathlib import Path
from urllib.parse import quote, unquote

from mooncake_redis.files.byte_store import FileByteStore

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

    def remove_stale(self, registered: Collection[str], min_age_s: float) -> int:
        """Delete the directories (and their files) of segments that are not registered
        and that nothing wrote to for min_age_s: stores that ended without close(), whose
        segments were unmounted for them. How many went."""
        removed = 0
        oldest = time.time() - min_age_s
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.root):
                if not entry.name.startswith(DIRECTORY_PREFIX) or not entry.is_dir():
                    continue
                segment = unquote(entry.name[len(DIRECTORY_PREFIX):])
                if segment in registered or entry.stat().st_mtime > oldest:
                    continue
                store = FileByteStore(entry.path, segment)
                remove_files(store)
                removed += not store.directory.exists()
        return removed


def remove_files(store: FileByteStore) -> None:
    """Delete every file of a store, then its directory if nothing else is in it."""
    for name in store.files():
        store.delete(name)
    with contextlib.suppress(OSError):  # another file in it (a write under way): keep it
        store.directory.rmdir()

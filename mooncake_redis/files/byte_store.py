"""Where a data plane keeps object bytes: a directory of files, one segment of the store.

The store (Index) records where each object's bytes are (a replica: segment, location,
medium) and announces on its events streams when they may be freed; it never touches the
bytes. FileByteStore is the other half for the simplest storage there is, a directory on
a (possibly shared) filesystem: it writes each object's bytes to a file of its own, names
that file as the replica's location, and deletes files when events say their object is
gone (`release`). examples/file_data_plane.py and hicache.py both use it.

Every write gets a fresh file name (the key, quoted, a random tag and the bytes' digest),
never reused: an event that frees an old copy of a key can then never delete a newer one,
however late it is applied; and the digest in the name tells whether a stored copy holds
the same bytes as a new one without reading it (`digest_of`). Locations read back from
Redis are only ever file names inside the directory (checked), so whoever can write the
namespace cannot make the data plane read or delete a file elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote, unquote

import blake3

from mooncake_redis.errors import InvalidArgument
from mooncake_redis.models import Replica
from mooncake_redis.store.events import Event
from mooncake_redis.values import decode_replicas, to_int

SUFFIX = ".bin"
_NAME = re.compile(r"([A-Za-z0-9_.~%-]*)@([0-9a-f]{16})(?:-([0-9a-f]{16}))?\.bin")
"""<quoted key>@<tag>-<digest>.bin: the only names the store writes, reads or deletes
(names without -<digest>, written by earlier releases, are still read and deleted)."""
_TEMPORARY = re.compile(r"\.(.+)\.tmp")
""".<name>.tmp: a file being written (write), left behind when the writer was cut off."""

NAME_MAX = 255
"""The longest file name the filesystems in use take (ext4, xfs, tmpfs)."""
MAX_QUOTED_KEY = NAME_MAX - len(f".@{'0' * 16}-{'0' * 16}{SUFFIX}.tmp")
"""The longest percent-encoded key whose file names fit NAME_MAX, the temporary one
included (212 bytes)."""

FREED_TYPES = frozenset({"evicted", "removed", "revoked"})
"""Event types whose replicas are free at once."""


@dataclass
class Released:
    """What one release() call did."""

    deleted: int = 0
    """Files deleted."""
    bytes: int = 0
    """Their bytes."""
    waiting: list[Event] = field(default_factory=list)
    """`replaced` events whose free_after is still ahead: pass them again later."""
    spared: int = 0
    """Files collect() kept because they are younger than its grace (a put may be under
    way): a later collect takes them if no stored object names them by then."""
    due: float | None = None
    """When (clock seconds) the first spared file is past the grace."""


def digest(data: bytes | memoryview) -> str:
    """The digest a file name carries: blake3 of the bytes, 64 bits in hex (enough to tell
    two copies of one key apart; nobody chooses the bytes to collide)."""
    return blake3.blake3(data).hexdigest(length=8)


class FileByteStore:
    """One segment's bytes as files in one directory."""

    def __init__(self, directory: str | os.PathLike[str], segment: str, medium: str = "disk"):
        self.directory = Path(directory)
        self.segment = segment
        self.medium = medium
        self.make_directory()

    def make_directory(self) -> None:
        """Create the directory if it is not there (again: a live store's keeper removes the
        directory of a segment that was unmounted, once it is empty)."""
        self.directory.mkdir(parents=True, exist_ok=True)

    # -- bytes ---------------------------------------------------------------------------

    def write(self, key: str, data: bytes | memoryview) -> Replica:
        """Write an object's bytes to a new file (written whole, then renamed into place,
        so a reader never sees half of it); the replica to give put_start."""
        name = f"{quote(key, safe='')}@{secrets.token_hex(8)}-{digest(data)}{SUFFIX}"
        temporary = self.directory / f".{name}.tmp"
        with self._created(temporary) as out:
            out.write(data)
        os.replace(temporary, self.directory / name)
        return Replica(self.segment, name, self.medium, len(data))

    def _created(self, path: Path) -> BinaryIO:
        """A new file in the directory, open for writing; the directory is made again if
        it is gone (a live store's keeper removed it while the segment was unmounted)."""
        try:
            return open(path, "wb")
        except FileNotFoundError:
            self.make_directory()
            return open(path, "wb")

    def reserve(self, key: str, size: int) -> Replica:
        """A new file of size zero bytes (sparse where the filesystem allows), to be filled
        in place with write_at before the object is completed. Its name carries no
        digest: the bytes are not known yet."""
        name = f"{quote(key, safe='')}@{secrets.token_hex(8)}{SUFFIX}"
        with self._created(self.directory / name) as out:
            out.truncate(size)
        return Replica(self.segment, name, self.medium, size)

    def write_at(self, replica: Replica, offset: int, data: bytes | memoryview) -> bool:
        """Write data into a reserved file at offset; False if the file is gone or the
        range runs past its size."""
        if offset < 0 or offset + len(data) > replica.size:
            return False
        try:
            descriptor = os.open(self.path(replica.location), os.O_WRONLY)
        except FileNotFoundError:
            return False
        try:
            return os.pwrite(descriptor, data, offset) == len(data)
        finally:
            os.close(descriptor)

    def read(self, replica: Replica) -> bytes | None:
        """The replica's bytes; None if its file is gone (freed meanwhile) or not whole."""
        try:
            data = self.path(replica.location).read_bytes()
        except FileNotFoundError:
            return None
        return data if not replica.size or len(data) == replica.size else None

    def read_into(self, replica: Replica, buffer: memoryview) -> bool:
        """Fill buffer (writable, byte-cast) with the replica's bytes; False if its file is
        gone or its size is not the buffer's."""
        try:
            with open(self.path(replica.location), "rb", buffering=0) as source:
                if os.fstat(source.fileno()).st_size != len(buffer):
                    return False
                return source.readinto(buffer) == len(buffer)
        except FileNotFoundError:
            return False

    def read_range(self, replica: Replica, offset: int, buffer: memoryview) -> bool:
        """Fill buffer with the replica's bytes from offset on; False if its file is gone
        or holds fewer bytes than that."""
        try:
            with open(self.path(replica.location), "rb", buffering=0) as source:
                source.seek(offset)
                return source.readinto(buffer) == len(buffer)
        except FileNotFoundError:
            return False

    def delete(self, location: str) -> int | None:
        """Delete a file; its bytes, or None if it was not there."""
        path = self.path(location)
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return None
        return size

    def path(self, location: str) -> Path:
        """The file a replica location names, refused unless it is one of our names."""
        if not _NAME.fullmatch(location):
            raise InvalidArgument(f"replica location {location!r} is not a file name this "
                                  f"store writes (<quoted key>@<tag>-<digest>{SUFFIX})")
        return self.directory / location

    def is_ours(self, replica: Replica) -> bool:
        return replica.segment == self.segment and bool(_NAME.fullmatch(replica.location))

    def files(self) -> dict[str, int]:
        """Every finished file in the directory: name -> bytes."""
        return {entry.name: entry.stat().st_size for entry in os.scandir(self.directory)
                if entry.is_file() and _NAME.fullmatch(entry.name)}

    def used_bytes(self) -> int:
        return sum(self.files().values())

    @staticmethod
    def key_of(location: str) -> str | None:
        """The object key a file name was written for."""
        match = _NAME.fullmatch(location)
        return unquote(match.group(1)) if match else None

    @staticmethod
    def digest_of(location: str) -> str | None:
        """The digest of the bytes a file name was written with (`digest`); None for a name
        that carries none (an earlier release's) or is not ours."""
        match = _NAME.fullmatch(location)
        return match.group(3) if match else None

    # -- freeing -------------------------------------------------------------------------

    def release(self, events: Iterable[Event], now_ms: int) -> Released:
        """Delete the files the events free (docs/EVENTS.md): the replicas on this segment
        of evicted, removed and revoked objects; the dropped replicas of an invalidated
        object (every file of the key for an event that names none); a replaced object's
        old replicas once free_after (Redis ms) is past `now_ms`, else the event comes
        back in `waiting`."""
        released = Released()
        for event in events:
            if event.type == "invalidated":
                if "dropped" in event.extra:  # the replicas the unmount dropped
                    self._delete_all([r.location for r in decode_replicas(
                        event.extra["dropped"], event.size) if self.is_ours(r)], released)
                elif event.extra.get("segment") == self.segment:  # an event that names none
                    self._delete_all(self._locations_of(event.key), released)
                continue
            if event.type == "replaced" and to_int(event.extra.get("free_after")) > now_ms:
                released.waiting.append(event)
                continue
            if event.type in FREED_TYPES or event.type == "replaced":
                self._delete_all([r.location for r in event.replicas if self.is_ours(r)],
                                 released)
        return released

    def collect(self, in_scope: Callable[[str], bool], live: Collection[str],
                grace_s: float, now: float) -> Released:
        """Delete the files no stored object names (after events were lost, or a writer
        died between its file and its put): those whose key is in scope, not in `live` (the
        locations stored objects name) and older than grace_s at `now` (seconds, the
        filesystem's clock: younger ones may belong to a put still under way; they are
        counted in `spared`); and the temporary files of cut writes older than grace_s."""
        released = Released()
        oldest = now - grace_s
        doomed: list[str] = []
        temporary: list[str] = []
        for name, key, mtime, finished in self._entries():
            if (finished and name in live) or not in_scope(key):
                continue
            if mtime > oldest:
                released.spared += 1
                due = mtime + grace_s
                released.due = due if released.due is None else min(released.due, due)
            else:
                (doomed if finished else temporary).append(name)
        self._delete_all(doomed, released)
        for name in temporary:
            with contextlib.suppress(FileNotFoundError):
                size = (self.directory / name).stat().st_size
                (self.directory / name).unlink()
                released.deleted += 1
                released.bytes += size
        return released

    def _entries(self) -> list[tuple[str, str, float, bool]]:
        """(file name, key, mtime, finished) of our finished files and of the temporary
        files of writes (finished False)."""
        found = []
        for entry in os.scandir(self.directory):
            temporary = _TEMPORARY.fullmatch(entry.name)
            match = _NAME.fullmatch(temporary.group(1) if temporary else entry.name)
            if match is None:
                continue
            with contextlib.suppress(FileNotFoundError):  # deleted meanwhile
                if entry.is_file():
                    found.append((entry.name, unquote(match.group(1)),
                                  entry.stat().st_mtime, temporary is None))
        return found

    def _locations_of(self, key: str) -> list[str]:
        start = f"{quote(key, safe='')}@"
        return [entry.name for entry in os.scandir(self.directory)
                if entry.name.startswith(start) and _NAME.fullmatch(entry.name)]

    def _delete_all(self, locations: Iterable[str], released: Released) -> None:
        for location in locations:
            size = self.delete(location)
            if size is not None:
                released.deleted += 1
                released.bytes += size

"""The drop-in's background thread, one per store with a segment: what a Mooncake client's
own threads do for it (its pings to the master, freeing its segment's memory), and what
Mooncake's master does for clients that died.

Every interval, on a client of its own: heartbeat the segment (mount it again if the
store unmounted it meanwhile, e.g. after missed heartbeats: Mooncake's client re-mounts
its segments when the master has forgotten it); unmount the segments of stores that died
(their heartbeats stopped for segment_heartbeat_timeout_ms by Redis TIME: Mooncake's
master drops a client whose lease ran out); apply the events streams (delete the files of
this segment's replicas that eviction, removal, unmount or an upsert freed) and, every
SWEEP_INTERVAL_S, sweep this segment's directory for files no stored object names (what
writers that died between a file and its put left, in any store's segment); delete what
is left in the directories of segments that are no longer registered (a dead store's
files); re-read the segments' free bytes for placement, and run an eviction job when usage
is above the high watermark (what Mooncake's master does in its eviction thread; a put
refused for space runs one at once, in the caller's thread). A file is only ever deleted
once it is older than GRACE_S (a put naming it may be under way); a younger one waits
for a later round.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from mooncake_redis.files.data_plane import FileDataPlane

from ..errors import SegmentExists, SegmentNotMounted, SegmentUnmounting
from ..index import Index
from .codes import FAILURES
from .placement import SegmentView
from .segment_files import SegmentFiles

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
"""How often: well inside the 10 s after which a silent segment is unmounted
(segment_heartbeat_timeout_ms of a namespace the drop-in creates, Mooncake's
client_live_ttl_sec)."""

GRACE_S = 60.0
"""How old a file no stored object names must be before it is deleted: longer than any
writer takes between writing a file and the put that names it."""

SWEEP_INTERVAL_S = 300.0
"""How often the keeper lists the namespace to sweep its own segment's directory."""

Clock = Callable[[], float]


def mount(index: Index, segment: str, capacity_bytes: int) -> None:
    """Mount the segment; one registered already under this name (this store's earlier
    life, or a mount cut short) is taken over with this capacity."""
    try:
        index.mount_segment(segment, capacity_bytes)
    except SegmentExists:
        index.remount_segment(segment, capacity_bytes)


class Keeper:
    def __init__(self, open_plane: Callable[[Clock], FileDataPlane],
                 capacity_bytes: Callable[[], int], view: SegmentView, files: SegmentFiles,
                 interval_s: float = INTERVAL_S):
        """open_plane(clock): the keeper's data plane, its files' ages measured on clock.
        capacity_bytes: the segment's capacity now (segments mounted on it since setup add
        to it). files: the namespace's segment directories."""
        self._open_plane = open_plane
        self._capacity = capacity_bytes
        self._view = view
        self._files = files
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mooncake-drop-in-keeper",
                                        daemon=True)
        self.clock: Clock = time.time
        """The time files' ages are measured with (the filesystem's; tests move it on)."""
        self.rounds = 0
        """Rounds done (tests wait on it instead of sleeping)."""
        self._round_done = threading.Condition()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def wait_rounds(self, count: int, timeout_s: float) -> bool:
        """Wait until `count` more rounds are done (False after timeout_s)."""
        with self._round_done:
            target = self.rounds + count
            return self._round_done.wait_for(lambda: self.rounds >= target, timeout_s)

    def now(self) -> float:
        return self.clock()

    def _run(self) -> None:
        plane = None
        while not self._stop.is_set():
            try:
                plane = plane or self._open_plane(self.now)
                self.round(plane)
            except FAILURES as error:  # Redis away: next round
                log.warning("mooncake drop-in keeper: %s", error)
            with self._round_done:
                self.rounds += 1
                self._round_done.notify_all()
            self._stop.wait(self._interval)
        if plane is not None:
            plane.index.close()

    def round(self, plane: FileDataPlane) -> None:
        segment = plane.store.segment
        try:
            plane.index.segment_heartbeat(segment)
        except SegmentNotMounted:
            log.warning("segment %s was unmounted (missed heartbeats?): mounting it again",
                        segment)
            plane.store.make_directory()
            mount(plane.index, segment, self._capacity())
        except SegmentUnmounting:
            log.warning("segment %s is being unmounted; mounting it again once that is "
                        "done", segment)
        # after our own heartbeat (never ours), which goes on between a long sweep's pages
        plane.index.unmount_silent_segments(lambda _: plane.index.segment_heartbeat(segment))
        plane.release()
        usage = self._view.refresh(plane.index)
        dead = self._files.collect_dead(usage.segments, plane.resync_min_age_s, self.now())
        if dead.deleted:
            log.info("deleted %d files (%d bytes) of segments no longer mounted",
                     dead.deleted, dead.bytes)
        if usage.ratio > plane.index.settings.high_watermark:
            plane.evict()

"""The drop-in's background thread, one per store with a segment: what a Mooncake client's
own threads do for it (its pings to the master, freeing its segment's memory).

Every interval, on a client of its own: heartbeat the segment (mount it again if the
store unmounted it meanwhile, e.g. after missed heartbeats: Mooncake's client re-mounts
its segments when the master has forgotten it), apply the events streams (delete the
files of this segment's replicas that eviction, removal, unmount or an upsert freed),
re-read the segments' free bytes for placement, and run an eviction job when usage is
above the high watermark (what Mooncake's master does in its eviction thread; a put
refused for space runs one at once, in the caller's thread).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from mooncake_redis.files.data_plane import FileDataPlane

from ..errors import SegmentExists, SegmentNotMounted, SegmentUnmounting
from ..index import Index
from .codes import FAILURES
from .placement import SegmentView

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
"""How often: well inside the 10 s after which a silent segment is unmounted
(segment_heartbeat_timeout_ms of a namespace the drop-in creates, Mooncake's
client_live_ttl_sec)."""


def mount(index: Index, segment: str, capacity_bytes: int) -> None:
    """Mount the segment; one registered already under this name (this store's earlier
    life, or a mount cut short) is taken over with this capacity."""
    try:
        index.mount_segment(segment, capacity_bytes)
    except SegmentExists:
        index.remount_segment(segment, capacity_bytes)


class Keeper:
    def __init__(self, open_plane: Callable[[], FileDataPlane],
                 capacity_bytes: Callable[[], int], view: SegmentView,
                 interval_s: float = INTERVAL_S):
        """capacity_bytes: the segment's capacity now (segments mounted on it since
        setup add to it)."""
        self._open_plane = open_plane
        self._capacity = capacity_bytes
        self._view = view
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mooncake-drop-in-keeper",
                                        daemon=True)
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

    def _run(self) -> None:
        plane = None
        while not self._stop.is_set():
            try:
                plane = plane or self._open_plane()
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
            mount(plane.index, segment, self._capacity())
        except SegmentUnmounting:
            log.warning("segment %s is being unmounted; mounting it again once that is "
                        "done", segment)
        plane.release()
        usage = self._view.refresh(plane.index)
        if usage.ratio > plane.index.settings.high_watermark:
            plane.evict()

"""What lost events and killed Mooncake drop-in stores leave on disk (issue 34 item 3).

    .venv/bin/python scripts/measure_leaks.py [--pages 3000] [--stores 2] [--kills 8]

Starts a redis-server of its own (tests/redis_server.py), then prints one JSON line per
phase:
1. "resync": a file data plane stores --pages pages of one shard; an eviction takes most
   of them and their events are lost (the shard's stream trimmed, as its cap does at
   maxmemory). Counted: the evicted pages' files still on disk after the first release()
   (the resync spares files younger than its grace) and after a later release() whose
   clock is past the grace.
2. "killed": --stores drop-in stores write; --kills more write too and are SIGKILLed, with
   the others still writing (every fourth inside a file write, every fourth between its
   file and its put, the rest at a random moment). Counted once the dead segments' owners
   are past the heartbeat timeout and the survivors' keepers had 20 rounds: dead segments
   still registered, the files in their directories (and bytes), files no stored object
   names (and bytes), temporary files of cut writes, registered replicas without a file;
   then ("after") again once the survivors' keepers ran with their clocks past the grace.
On a version without the later collection, "later" and "after" count what stays for good.

    .venv/bin/python scripts/measure_leaks.py child URL NAMESPACE DATA_DIR MODE [PREFERRED]

is one drop-in store process (tests/test_leaks.py runs them too). MODE: writer (puts until
"stop" on stdin; then "collect" moves its keeper's clock an hour on, "close" closes it),
victim (puts; says "going" after 20 puts, to be killed), cut (dies inside its 21st file
write, leaving the .tmp), orphan (dies after its 21st file, before the put). Victims put a
replica on PREFERRED (a writer's segment), so what they leave is in a live segment too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VALUE_BYTES = 4096
PUTS_BEFORE_DEATH = 20
HEARTBEAT_TIMEOUT_MS = 5000
KEEPER_INTERVAL_S = 0.1
NAMESPACE = "leaks"
HOUR_S = 3600.0


# -- one store process -------------------------------------------------------------------


def child(url: str, namespace: str, data_dir: str, mode: str, preferred: str) -> None:
    from mooncake_redis.files import byte_store
    from mooncake_redis.mooncake import MooncakeDistributedStore, ReplicateConfig
    from mooncake_redis.mooncake import store as store_module

    store_module.INTERVAL_S = KEEPER_INTERVAL_S  # type: ignore[attr-defined]
    store = MooncakeDistributedStore()
    assert store.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                        "master_server_addr": url, "namespace": namespace,
                        "data_dir": data_dir, "global_segment_size": "64MB"}) == 0
    print("ready", store.get_hostname(), flush=True)
    writes = [0]
    write = byte_store.FileByteStore.write

    def tripwire(self: Any, key: str, data: Any) -> Any:
        writes[0] += 1
        if writes[0] > PUTS_BEFORE_DEATH and mode == "cut":
            name = f"{key}@{'0' * 16}-{byte_store.digest(data)}{byte_store.SUFFIX}"
            with open(self.directory / f".{name}.tmp", "wb") as out:
                out.write(bytes(data)[:len(data) // 2])
                out.flush()
                os.kill(os.getpid(), signal.SIGKILL)
        replica = write(self, key, data)
        if writes[0] > PUTS_BEFORE_DEATH and mode == "orphan":
            os.kill(os.getpid(), signal.SIGKILL)
        return replica

    byte_store.FileByteStore.write = tripwire  # type: ignore[method-assign]
    config = ReplicateConfig()
    config.replica_num = 2
    if preferred:
        config.preferred_segment = preferred
    stop = threading.Event()
    if mode == "writer":
        threading.Thread(target=_commands, args=(store, stop), daemon=True).start()
    number = 0
    while not stop.is_set():
        number += 1
        store.put(f"{mode}-{os.getpid()}-{number}", os.urandom(VALUE_BYTES), config)
        if number == PUTS_BEFORE_DEATH and mode == "victim":
            print("going", flush=True)
        time.sleep(0.005)  # pacing: a few thousand files a run, not hundreds of MB
    print("stopped", flush=True)
    threading.Event().wait()  # the command thread ends the process


def _commands(store: Any, stop: threading.Event) -> None:
    for line in sys.stdin:
        command = line.strip()
        if command == "stop":
            stop.set()
        elif command == "collect":
            keeper = store._open.keeper
            if hasattr(keeper, "clock"):
                keeper.clock = lambda: time.time() + HOUR_S
            print("collecting", hasattr(keeper, "clock"), flush=True)
        elif command == "close":
            print("closed", store.close(), flush=True)
            os._exit(0)


# -- what is on disk ---------------------------------------------------------------------


def stored_files(index: Any) -> dict[tuple[str, str], int]:
    """(segment, file name) -> size of every replica the index holds."""
    reader = index.events()
    try:
        return {(replica.segment, replica.location): stored.size
                for stored in reader.list_all() for replica in stored.replicas}
    finally:
        reader.close()


def disk(data_dir: Path) -> tuple[dict[tuple[str, str], int], int, set[str]]:
    """(segment, file name) -> bytes of every finished file, the temporary files, and
    the segment directories."""
    from urllib.parse import unquote

    from mooncake_redis.mooncake.segment_files import DIRECTORY_PREFIX

    files, temporary, directories = {}, 0, set()
    for directory in data_dir.glob(f"{DIRECTORY_PREFIX}*"):
        segment = unquote(directory.name[len(DIRECTORY_PREFIX):])
        try:
            paths = list(directory.iterdir())
        except FileNotFoundError:  # a keeper removed it meanwhile
            continue
        directories.add(segment)
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                if path.name.endswith(".tmp"):
                    temporary += 1
                elif path.name.endswith(".bin"):
                    files[(segment, path.name)] = path.stat().st_size
    return files, temporary, directories


def leaks(index: Any, data_dir: Path, dead: set[str]) -> dict[str, int]:
    """Dead segments still registered, orphan files and bytes, temporary files, dead
    segments' directories, and registered replicas whose file is missing."""
    files, temporary, directories = disk(data_dir)
    stored = stored_files(index)
    orphans = {name: size for name, size in files.items() if name not in stored}
    of_dead = {name: size for name, size in files.items() if name[0] in dead}
    return {"dead_segments_registered": len(dead & set(index.usage().segments)),
            "dead_segments_files": len(of_dead), "dead_segments_bytes": sum(of_dead.values()),
            "orphan_files": len(orphans), "orphan_bytes": sum(orphans.values()),
            "tmp_files": temporary, "dead_directories": len(dead & directories),
            "stored_without_file": len(set(stored) - set(files))}


# -- the measurement ---------------------------------------------------------------------


def measure_resync(url: str, pages: int) -> dict[str, Any]:
    import inspect

    from mooncake_redis import Index
    from mooncake_redis.capacity.eviction import ROUND_LIMIT
    from mooncake_redis.files.byte_store import FileByteStore
    from mooncake_redis.files.data_plane import FileDataPlane, Page

    now = [time.time()]
    index = Index.from_url(url, "resync", lease_ttl_ms=0)
    options: dict[str, Any] = {"evict_inline": False}
    if "clock" in inspect.signature(FileDataPlane).parameters:
        options["clock"] = lambda: now[0]
    with tempfile.TemporaryDirectory() as directory:
        plane = FileDataPlane(index, FileByteStore(directory, "disk0"), pages * 64 * 2,
                              **options)
        plane.release()
        chunk = [Page(f"ab{n:062x}", b"z" * 64) for n in range(pages)]
        for start in range(0, pages, 500):
            assert all(plane.put(chunk[start:start + 500]))
        plane.release()
        while index.evict(0.1).stopped == ROUND_LIMIT:
            pass
        events = index.schema.shard_keys(index.schema.shard("ab" * 32)).events
        index.client.xtrim(events, maxlen=1, approximate=False)
        evicted = pages - index.usage().objects
        plane.release()
        kept_first = len(os.listdir(directory)) - index.usage().objects
        now[0] += 2 * plane.resync_min_age_s
        plane.release()
        kept_later = len(os.listdir(directory)) - index.usage().objects
    return {"phase": "resync", "pages": pages, "evicted": evicted,
            "kept_after_first_pass": kept_first, "kept_after_later_pass": kept_later,
            "collected_by_later_pass": kept_first - kept_later}


def spawn(url: str, data_dir: Path, mode: str, preferred: str = "") -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, __file__, "child", url, NAMESPACE, str(data_dir),
                             mode, preferred], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def answer(process: subprocess.Popen[str]) -> list[str]:
    assert process.stdout is not None
    return process.stdout.readline().split()


def tell(process: subprocess.Popen[str], command: str) -> list[str]:
    assert process.stdin is not None
    process.stdin.write(command + "\n")
    process.stdin.flush()
    return answer(process)


def measure_killed(url: str, stores: int, kills: int, data_dir: Path) -> list[dict[str, Any]]:
    from mooncake_redis import Index

    index = Index.from_url(url, NAMESPACE, segment_heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS)
    writers = [spawn(url, data_dir, "writer") for _ in range(stores)]
    hosts = [answer(writer)[1] for writer in writers]
    modes = ["cut", "orphan", "victim", "victim"] * (kills // 4) + ["victim"] * (kills % 4)
    victims = [spawn(url, data_dir, mode, hosts[n % stores]) for n, mode in enumerate(modes)]
    dead = {answer(victim)[1] for victim in victims}
    for victim, mode in zip(victims, modes):
        if mode == "victim":
            assert answer(victim) == ["going"]
            time.sleep(random.uniform(0, 0.05))  # a random moment of its put loop
            victim.kill()
        victim.wait(120)
    deadline = time.monotonic() + 120
    while dead & set(index.usage().segments) and time.monotonic() < deadline:
        time.sleep(0.1)  # unmounted by the survivors' keepers, if they do that
    time.sleep(20 * KEEPER_INTERVAL_S + HEARTBEAT_TIMEOUT_MS / 1000)
    for writer in writers:
        assert tell(writer, "stop") == ["stopped"]
    rows = [{"phase": "killed", "stores": stores, "kills": kills, **leaks(index, data_dir, dead)}]
    collecting = [tell(writer, "collect") for writer in writers]
    if all(reply == ["collecting", "True"] for reply in collecting):
        deadline = time.monotonic() + 120
        while any(value for name, value in leaks(index, data_dir, dead).items()) and \
                time.monotonic() < deadline:
            time.sleep(0.1)
    rows.append({"phase": "after", **leaks(index, data_dir, dead)})
    for writer in writers:
        tell(writer, "close")
        writer.wait(120)
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(*sys.argv[2:6], sys.argv[6] if len(sys.argv) > 6 else "")
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--stores", type=int, default=2)
    parser.add_argument("--kills", type=int, default=8)
    arguments = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from redis_server import RedisServer

    server = RedisServer()
    try:
        print(json.dumps(measure_resync(server.url, arguments.pages)), flush=True)
        with tempfile.TemporaryDirectory() as data_dir:
            for row in measure_killed(server.url, arguments.stores, arguments.kills,
                                      Path(data_dir)):
                print(json.dumps(row), flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()

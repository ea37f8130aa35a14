"""Check `mooncake-redis ingest` against vLLM's own KV-events publisher.

    pip download vllm==0.33.0 --no-deps -d /tmp/vllm
    .venv/bin/pip install msgspec        # vLLM's encoder (not a dependency of this project)
    .venv/bin/python scripts/check_vllm_ingest.py /tmp/vllm/vllm-0.33.0-*.whl

Loads vllm/distributed/kv_events.py from the wheel, with small stand-ins for the four vllm
modules it imports (vllm.config.kv_events, vllm.logger, vllm.utils.network_utils,
vllm.v1.core.kv_cache_utils: `import vllm` needs torch and the engine), and starts its
ZmqEventPublisher as `vllm serve --kv-events-config` does (a PUB and a replay ROUTER on
wildcard endpoints, msgspec's encoder). Then, with a redis-server of its own on a free
port (or --url):

1. publishes batches before any ingester runs (blocks of two KV-cache groups, an int and
   a sha256 chain);
2. starts `mooncake-redis ingest --zmq ... --replay ... --topic ... --pod vllm-0` as a
   process, which must find those batches in the replay buffer;
3. publishes more: group 1 removing a block that group 0 keeps, a REMOTE store, a chain
   continued in a later batch, waits until the ingester applied every batch, and checks
   the tree with pods_for_prefix (vLLM's hashes) and pods_for_tokens (the tokens alone);
4. restarts the engine's publisher (a new ZmqEventPublisher on the same endpoints, its
   sequence from 0 again) and checks that the pod holds only what the new run stored;
   then stops the ingester with SIGTERM and checks its counters.

Prints what it did; exit 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODULE = "vllm/distributed/kv_events.py"
POD = "vllm-0"
TOPIC = "kv-events"
NAMESPACE = "vllm-check"
BLOCK_SIZE = 16
DEADLINE_S = 60
problems: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok       " if ok else "MISMATCH ") + what)
    if not ok:
        problems.append(what)


def free_port() -> int:
    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_bindable(*ports: int, deadline_s: float = 5.0) -> None:
    """Until each port can be bound again on the wildcard address, as the publisher's
    `tcp://*:port` does. ZeroMQ's close(linger=0) returns before its I/O thread has
    closed the listening socket, so a publisher bound at once on the same port can get
    EADDRINUSE. The probe sets SO_REUSEADDR, as libzmq does on its listeners, so
    connections left in TIME_WAIT do not hold it up: only a port still listening does."""
    end = time.monotonic() + deadline_s
    for port in ports:
        while True:
            with contextlib.closing(socket.socket()) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(("", port))
                    break
                except OSError as error:
                    if time.monotonic() > end:
                        raise RuntimeError(
                            f"port {port} was still in use {deadline_s} s after the old "
                            f"publisher's shutdown ({error}): cannot restart the publisher "
                            "on the same endpoints") from error
            time.sleep(0.005)


# -- vLLM's module, from the wheel ---------------------------------------------------------


def stand_ins() -> None:
    """The names kv_events.py imports from the rest of vLLM: a KVEventsConfig with its
    fields (vllm/config/kv_events.py), a logger, the network helpers for tcp://host:port
    endpoints, and ExternalBlockHash (bytes | int)."""

    @dataclass
    class KVEventsConfig:
        enable_kv_cache_events: bool = False
        publisher: str | None = None
        endpoint: str = "tcp://*:5557"
        replay_endpoint: str | None = None
        buffer_steps: int = 10_000
        hwm: int = 100_000
        max_queue_size: int = 100_000
        topic: str = ""

    def split_zmq_path(path: str) -> tuple[str, str, str]:
        scheme, _, rest = path.partition("://")
        host, _, port = rest.rpartition(":")
        return scheme, host, port

    modules = {
        "vllm.config.kv_events": {"KVEventsConfig": KVEventsConfig},
        "vllm.logger": {"init_logger": logging.getLogger},
        "vllm.utils.network_utils": {
            "get_ip": lambda: "127.0.0.1", "get_tcp_uri": lambda ip, port: f"tcp://{ip}:{port}",
            "is_valid_ipv6_address": lambda address: ":" in address,
            "split_zmq_path": split_zmq_path},
        "vllm.v1.core.kv_cache_utils": {"ExternalBlockHash": bytes | int},
    }
    for name, names in modules.items():
        module = types.ModuleType(name)
        module.__dict__.update(names)
        sys.modules[name] = module


def load_kv_events(wheel: Path) -> types.ModuleType:
    stand_ins()
    with zipfile.ZipFile(wheel) as archive:
        source = archive.read(MODULE).decode()
    module = types.ModuleType("vllm.distributed.kv_events")
    module.__file__ = f"{wheel}!{MODULE}"
    sys.modules[module.__name__] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102
    return module


# -- Redis and the ingester -----------------------------------------------------------------


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    if shutil.which("redis-server") is None:
        sys.exit("redis-server is not on PATH: install it, or pass --url")
    port = free_port()
    directory = tempfile.mkdtemp(prefix="vllm-check-redis-")
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--dir", directory, "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL)
    try:
        import redis

        client = redis.Redis(port=port)
        end = time.monotonic() + DEADLINE_S
        while True:
            with contextlib.suppress(redis.ConnectionError):
                client.ping()
                break
            if time.monotonic() > end:
                sys.exit("redis-server did not start")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(directory, ignore_errors=True)


def start_ingester(url: str, endpoint: str, replay: str, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "mooncake_redis", "--url", url, "--namespace", NAMESPACE,
               "ingest", "--zmq", endpoint, "--replay", replay, "--topic", TOPIC,
               "--pod", POD, "--log-every", "1"]
    print("running:", " ".join(command))
    return subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def batches_applied(log: Path) -> int:
    found = re.findall(r"(\d+) batches applied", log.read_text(errors="replace"))
    return int(found[-1]) if found else 0


def counters(log: Path) -> dict[str, int]:
    """The counters of the ingester's last log line."""
    lines = [line for line in log.read_text(errors="replace").splitlines()
             if "batches applied" in line]
    tail = lines[-1].partition("batches applied, ")[2] if lines else ""
    return {name: int(value) for name, value in re.findall(r"(\w+) (\d+)", tail)}


def wait_for(log: Path, ingester: subprocess.Popen[bytes], expected: int, publish: Any,
             restarted: bool = False) -> int:
    """Until the ingester applied `expected` batches (after a restart of the publisher,
    counted as one); a batch published before it subscribed is shown by an empty batch
    (a gap it asks the replay socket for). Returns how many it must have applied."""
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end and ingester.poll() is None:
        done = batches_applied(log) >= expected and \
            (not restarted or counters(log).get("restarts") == 1)
        if done:
            break
        time.sleep(2.0)
        if batches_applied(log) < expected:
            publish()
            expected += 1
    return expected


# -- the scenario --------------------------------------------------------------------------


def tokens(first: int, blocks: int) -> list[int]:
    return list(range(first, first + blocks * BLOCK_SIZE))


def run(kv_events: Any, url: str) -> None:
    from mooncake_redis import Index
    from mooncake_redis.engines.vllm.pods import pods_for_prefix, pods_for_tokens

    port, replay_port = free_port(), free_port()
    publisher = kv_events.ZmqEventPublisher(0, f"tcp://*:{port}", f"tcp://*:{replay_port}",
                                            topic=TOPIC)

    def publish(*events: Any) -> None:
        publisher.publish(kv_events.KVEventBatch(ts=time.time(), events=list(events)))

    def stored(hashes: list[Any], parent: Any, token_ids: list[int], **fields: Any) -> Any:
        return kv_events.BlockStored(block_hashes=hashes, parent_block_hash=parent,
                                     token_ids=token_ids, block_size=BLOCK_SIZE, lora_id=None,
                                     medium="GPU", lora_name=None, **fields)

    chain = [0x7A00_0000_0000_0000 + i for i in range(6)]
    sha = [bytes([i]) * 32 for i in range(1, 4)]
    prompt = tokens(1000, 6)
    # 1. before any ingester: groups 0 and 1 store the first 4 blocks; a sha256 chain
    publish(stored(chain[:4], None, prompt[:4 * BLOCK_SIZE], group_idx=0))
    publish(stored(chain[:4], None, prompt[:4 * BLOCK_SIZE], group_idx=1))
    publish(stored(sha, None, tokens(9000, 3), group_idx=0))
    directory = Path(tempfile.mkdtemp(prefix="vllm-check-"))
    log = directory / "ingest.log"
    ingester = start_ingester(url, f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{replay_port}",
                              log)
    try:
        end = time.monotonic() + DEADLINE_S
        while batches_applied(log) < 3 and time.monotonic() < end and ingester.poll() is None:
            time.sleep(0.2)  # until it has caught up from the replay buffer
        # 3. while it follows: group 1 drops block 3, a REMOTE store, the chain continued
        publish(kv_events.BlockRemoved(block_hashes=[chain[3]], medium="GPU", group_idx=1))
        publish(stored([0x7B00_0000_0000_0000], None, tokens(5000, 1), locality="REMOTE"))
        publish(stored(chain[4:], chain[3], prompt[4 * BLOCK_SIZE:], group_idx=0))
        expected = wait_for(log, ingester, 6, publish)
        index = Index.from_url(url, NAMESPACE)
        before_restart = {"by_hash": pods_for_prefix(index, chain),
                          "by_tokens": pods_for_tokens(index, prompt, BLOCK_SIZE),
                          "sha": pods_for_prefix(index, sha),
                          "remote": pods_for_prefix(index, [0x7B00_0000_0000_0000])}
        # 4. the engine restarts: a new publisher on the same endpoints counts from 0 again
        old, publisher = publisher, None  # shut down once, here, not again in `finally`
        old.shutdown()
        wait_until_bindable(port, replay_port)  # its sockets close after shutdown returns
        publisher = kv_events.ZmqEventPublisher(0, f"tcp://*:{port}", f"tcp://*:{replay_port}",
                                                topic=TOPIC)
        publish(stored(chain[:1], None, prompt[:BLOCK_SIZE], group_idx=0))
        expected = wait_for(log, ingester, expected + 1, publish, restarted=True)
    finally:
        ingester.send_signal(signal.SIGTERM)
        ingester.wait(DEADLINE_S)
        if publisher is not None:
            publisher.shutdown()
    print(log.read_text(errors="replace").strip())
    print()
    seen = counters(log)
    check(ingester.returncode == 0, f"the ingester exited {ingester.returncode} on SIGTERM")
    check(batches_applied(log) == expected, f"{batches_applied(log)} of {expected} batches "
                                            "applied")
    check(seen.get("replayed", 0) >= 3, "the 3 batches published before it started came from "
                                        f"vLLM's replay socket (replayed {seen.get('replayed')})")
    print(f"         {batches_applied(log) - seen.get('replayed', 0)} batches came on vLLM's PUB "
          f"socket; {seen.get('gaps')} gaps were filled from its replay socket; "
          f"{seen.get('duplicates')} duplicates skipped")
    check(seen.get("restarts") == 1 and seen.get("cleared", 0) > 0,
          f"the publisher's restart cleared the pod (restarts {seen.get('restarts')}, cleared "
          f"{seen.get('cleared')} objects)")
    check(seen.get("bad_events") == 0 and seen.get("bad_batches") == 0, "no bad event")
    check(seen.get("remote") == 1, f"the REMOTE store was not recorded (remote "
                                   f"{seen.get('remote')})")
    before = before_restart
    check(before["by_hash"] == [(POD, 6), (f"{POD}/g1", 3)],
          f"before the restart, pods_for_prefix(vLLM's hashes): {before['by_hash']} (group 1 "
          "dropped block 3, group 0 kept it)")
    check(before["by_tokens"] == [(POD, 6), (f"{POD}/g1", 3)],
          f"before the restart, pods_for_tokens(the prompt's tokens alone): "
          f"{before['by_tokens']}")
    check(before["sha"] == [(POD, 3)], "the sha256 chain was indexed")
    check(before["remote"] == [], "nothing for the REMOTE block")
    index = Index.from_url(url, NAMESPACE)
    after = (pods_for_prefix(index, chain), pods_for_tokens(index, prompt, BLOCK_SIZE),
             pods_for_prefix(index, sha))
    check(after == ([(POD, 1)], [(POD, 1)], []),
          f"after the restart, only what the new run stored: {after}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel", type=Path, help="the vllm wheel (pip download vllm --no-deps)")
    parser.add_argument("--url", help="a Redis to use (default: a redis-server of its own)")
    args = parser.parse_args()
    kv_events = load_kv_events(args.wheel)
    print(f"vLLM's ZmqEventPublisher from {args.wheel.name}")
    return checked(args.url, lambda url: run(kv_events, url))


def checked(url: str | None, scenario: Callable[[str], None]) -> int:
    """Run the scenario on the Redis at url (None: a redis-server of its own), print the
    verdict; the exit code (1 on a mismatch)."""
    with contextlib.ExitStack() as stack:
        scenario(url or stack.enter_context(redis_server()))
    print(f"{len(problems)} mismatches" if problems else "every check passed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

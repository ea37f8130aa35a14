"""Run by benchmarks/versions.py inside one checkout (its mooncake_redis first on sys.path):
registers a chat-shaped tree through that checkout's public API and prints, as one JSON
line, what each step cost per node. Uses only the API that v1 and v2 share.

    python version_probe.py NODES BATCH KEYS_PER_PAGE SEED TESTS_DIR
"""

from __future__ import annotations

import importlib.util
import json
import sys
from itertools import islice
from pathlib import Path
from types import ModuleType
from typing import Any

import redis

CEILING_SCRIPT = "redis.call('INCR', KEYS[1]) return 1"


def sibling(name: str) -> ModuleType:
    """A module of this directory, loaded by path: `benchmarks` on sys.path may be the
    checkout's own package."""
    spec = importlib.util.spec_from_file_location(f"probe_{name}",
                                                  Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def written(results: Any) -> None:
    """v2's batch calls return one result per item (v1's raise): every item must be written."""
    refused = [r for r in results or () if not r.ok]
    if refused:
        raise RuntimeError(f"{len(refused)} refused, e.g. {refused[0].key}: {refused[0].error}")


def main(argv: list[str]) -> int:
    nodes, batch, keys_per_page, seed = (int(a) for a in argv[:4])
    sys.path.insert(0, argv[4])
    from redis_server import RedisServer

    from mooncake_redis import Index

    meter, trees = sibling("meter"), sibling("trees")
    suffixes = [f"_0_{half}" for half in "kv"][:keys_per_page] or [""]
    pages = list(islice(trees.chat_pages(seed), nodes + 1))
    groups = [[(page + suffix, trees.OBJECT_BYTES, parent) for page, parent in pages[i:i + batch]
               for suffix in suffixes] for i in range(1, nodes + 1, batch)]
    server = RedisServer()
    try:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        index = Index.from_url(server.url, namespace="probe")
        warm = [(pages[0][0] + suffix, trees.OBJECT_BYTES, None) for suffix in suffixes]
        index.batch_put_start(warm)  # loads the scripts, reads Redis TIME once
        index.batch_put_end([key for key, _, _ in warm])
        sha = client.script_load(CEILING_SCRIPT)

        def ceiling() -> None:
            for _ in groups:
                pipe = client.pipeline(transaction=False)
                for _ in range(batch):
                    pipe.evalsha(sha, 1, "probe:ceiling")
                pipe.execute()

        def put_start() -> None:
            for items in groups:
                written(index.batch_put_start(items))

        def put_end() -> None:
            for items in groups:
                written(index.batch_put_end([key for key, _, _ in items]))

        steps = {"ceiling": ceiling, "put_start": put_start, "put_end": put_end}
        report = {name: meter.measure(client, step).per(nodes) for name, step in steps.items()}
    finally:
        server.stop()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The client's own instructions per removed key of batch_remove, counted by callgrind on
this Python process: unlike its CPU time, which the machine's load moves more than a
small change does, the count is the same from run to run (docs/BENCHMARKS.md, section 11).

    python -m benchmarks.client_instructions [--pages 2000]

Re-runs itself under valgrind. On a private redis-server: the pages (chat-shaped, with
parents) and one leaf page under each are stored, then the leaf pages are removed, 500
pages (1,000 keys) a call; the first call is not counted (imports, scripts loaded).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import bench_server, chunks, open_index, store_pages
from .instructions import CALL_PAGES, counted
from .registration import checked, pages_of
from .trees import KEYS_PER_PAGE, page_keys, random_hash

INSIDE = "MOONCAKE_CLIENT_CALLGRIND_OUT"
"""Set (to the output file's stem) when this process runs under callgrind."""


def measure(pages_count: int, out: Path) -> float:
    with bench_server() as server:
        index = open_index(server, shard_count=16)
        pages = pages_of(7, pages_count)
        rng = random.Random(11)
        leaves = [(random_hash(rng), page) for page, _ in pages]
        store_pages(index, iter(pages + leaves), len(pages + leaves), "store")
        calls = [[key for page, _ in group for key in page_keys(page)]
                 for group in chunks(leaves, CALL_PAGES)]
        checked(index.batch_remove(calls[0]))
        total = counted(os.getpid(), out, lambda: [checked(index.batch_remove(keys))
                                                   for keys in calls[1:]])
        index.close()
    return total / ((len(leaves) - CALL_PAGES) * KEYS_PER_PAGE)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.client_instructions",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    args = parser.parse_args()
    if os.environ.get(INSIDE):
        per_key = measure(args.pages, Path(os.environ[INSIDE]))
        print(f"client instructions per removed key ({args.pages} leaf pages, "
              f"{CALL_PAGES} a call, the first not counted): {per_key:,.0f}")
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    with tempfile.TemporaryDirectory(prefix="mooncake-callgrind-client-") as out_dir:
        out = Path(out_dir) / "client.out"
        env = {**os.environ, INSIDE: str(out), "PYTHONHASHSEED": "0"}
        done = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p",
                               sys.executable, "-m", "benchmarks.client_instructions",
                               "--pages", str(args.pages)], env=env, stderr=subprocess.DEVNULL,
                              check=False)
    raise SystemExit(done.returncode)


if __name__ == "__main__":
    main()

"""The vLLM ingester: blocks ingested per second by one process, and the latency of
pods_for_prefix (by vLLM block hashes) and pods_for_tokens (by token ids) with N blocks
stored.

Run: `python -m benchmarks.vllm_ingest --blocks 100000` (its own redis-server on a free
port). Each KV event batch carries one BlockStored of 16 blocks, as an engine step that
fills 16 blocks of 16 tokens does, encoded as vLLM 0.33 encodes it (msgpack, int block
hashes, random token ids) and timed from payload bytes to the trees: decode + put_start +
put_end + the token maps (every block also gets its token-hash node). Requests are chains
of 64 blocks (1,024 tokens) under a shared 4-block system prompt, spread over 8 pods; each
pod stores every chain of its share. The queries ask for whole chains (64 blocks: the
32-node probe, then the second round trip) and for 16-block ones, by block hashes and by
tokens (which first hashes the tokens: xxh3 per block, in the caller). Redis's
used_memory after the ingest is printed per block. Not run by `python -m benchmarks`;
docs/BENCHMARKS.md has the figures.
"""

from __future__ import annotations

import argparse
import random
import time

import msgpack

from mooncake_redis.engines.vllm.kv_events import decode_batch
from mooncake_redis.engines.vllm.pods import PodWriter, pods_for_prefix, pods_for_tokens

from .common import bench_server, latency, open_index, used_memory

BLOCKS_PER_EVENT = 16
CHAIN_BLOCKS = 64
SYSTEM_PROMPT_BLOCKS = 4
PODS = 8
BLOCK_SIZE = 16
VOCABULARY = 150_000


def payload(hashes: list[int], parent: int | None, tokens: list[int]) -> bytes:
    """A KVEventBatch as vLLM 0.33 encodes it: [ts, [tagged map], dp rank]."""
    event = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
             "token_ids": tokens, "block_size": BLOCK_SIZE, "lora_id": None,
             "medium": "GPU", "lora_name": None, "group_idx": 0}
    return msgpack.packb([time.time(), [event], 0])


def chains(count: int, rng: random.Random) -> tuple[list[int], list[list[int]]]:
    """Block hashes of the system prompt and of each chain's other blocks."""
    system = [rng.getrandbits(64) for _ in range(SYSTEM_PROMPT_BLOCKS)]
    return system, [[rng.getrandbits(64) for _ in range(CHAIN_BLOCKS - SYSTEM_PROMPT_BLOCKS)]
                    for _ in range(count)]


def tokens_of(block_hash: int) -> list[int]:
    """The block's token ids (random, fixed by its hash)."""
    rng = random.Random(block_hash)
    return [rng.randrange(VOCABULARY) for _ in range(BLOCK_SIZE)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=100_000, help="blocks to store")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-token-hashes", action="store_true",
                        help="record blocks under vLLM's hashes only (no pods_for_tokens)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    per_chain = CHAIN_BLOCKS - SYSTEM_PROMPT_BLOCKS
    system, bodies = chains(max(1, args.blocks // per_chain), rng)
    with bench_server() as server:
        index = open_index(server, namespace="vllm")
        writers = [PodWriter(index, f"pod-{p}", token_hashes=not args.no_token_hashes)
                   for p in range(PODS)]
        system_tokens = [t for h in system for t in tokens_of(h)]
        for writer in writers:
            writer.apply(decode_batch(payload(system, None, system_tokens)))
        memory_before = used_memory(index.client)
        batches = []
        for number, body in enumerate(bodies):
            parent = system[-1]
            for start in range(0, len(body), BLOCKS_PER_EVENT):
                hashes = body[start:start + BLOCKS_PER_EVENT]
                tokens = [t for h in hashes for t in tokens_of(h)]
                batches.append((writers[number % PODS], payload(hashes, parent, tokens)))
                parent = hashes[-1]
        began = time.perf_counter()
        for writer, data in batches:
            writer.apply(decode_batch(data))
        seconds = time.perf_counter() - began
        blocks = len(bodies) * per_chain
        usage = index.usage()
        memory = used_memory(index.client) - memory_before
        print(f"ingest: {blocks:,} blocks in {len(batches):,} batches of {BLOCKS_PER_EVENT} "
              f"(at most) in {seconds:.1f} s = {blocks / seconds:,.0f} blocks/s, "
              f"{len(batches) / seconds:,.0f} batches/s (one process); trees: "
              f"{usage.nodes:,} nodes, {usage.objects:,} objects; Redis used_memory "
              f"+{memory / 2**20:,.0f} MiB = {memory / blocks:,.0f} B per block")
        for length in (CHAIN_BLOCKS, 16):
            for by_tokens in (False, True)[:1 if args.no_token_hashes else 2]:
                samples = []
                for _ in range(args.queries):
                    number = rng.randrange(len(bodies))
                    chain = (system + bodies[number])[:length]
                    prompt = [t for h in chain for t in tokens_of(h)]  # before the clock
                    began = time.perf_counter()
                    if by_tokens:  # hashing the prompt's tokens is part of the query
                        runs = pods_for_tokens(index, prompt, BLOCK_SIZE)
                    else:
                        runs = pods_for_prefix(index, chain)
                    samples.append(time.perf_counter() - began)
                    if runs[0] != (f"pod-{number % PODS}", length):
                        raise AssertionError(f"chain {number}: {runs[:2]}")
                stats = latency(samples)
                query = "pods_for_tokens" if by_tokens else "pods_for_prefix"
                print(f"{query}, {length}-block chains: p50 {stats['p50_ms']:.2f} ms, "
                      f"p99 {stats['p99_ms']:.2f} ms ({stats['samples']} queries, "
                      f"{usage.objects:,} objects stored)")


if __name__ == "__main__":
    main()

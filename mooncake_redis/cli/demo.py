"""The demo: SGLang-style KV pages of a few multi-turn chats, stored the way an engine does
it (match the prefix, store the pages that are missing), then a look at the tree, a node's
raw data, leaf-first eviction and a consistency check."""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from mooncake_redis.context import Context
from mooncake_redis.index import Index
from mooncake_redis.operations.fsck import check
from mooncake_redis.text import human_bytes, plural
from mooncake_redis.urls import safe_url

from .render import Views, short

PAGE_TOKENS = 16
TP_RANKS = 2
LAYERS, KV_HEADS, HEAD_DIM, DTYPE_BYTES = 32, 8, 128, 2
"""A Llama-3-8B-like model in fp16, its 8 KV heads split over TP_RANKS ranks."""
KV_OBJECT_BYTES = DTYPE_BYTES * LAYERS * (KV_HEADS // TP_RANKS) * HEAD_DIM * PAGE_TOKENS
"""One page's K (or V) on one rank: 512 KiB, so 1 MiB of KV per page and rank."""
DEMO_CAPACITY_BYTES = 64 << 30
"""64 GiB: room for 65,536 pages of 1 MiB (admission lets a put take any free space: a
shard refused for its own limit borrows from the others)."""
SQUEEZE_ABOVE_WATERMARK = 0.05


@dataclass(frozen=True)
class Request:
    conversation: int
    turn: int
    chain: list[str]


def page_hashes(tokens: list[int]) -> list[str]:
    """SGLang HiCache style: each full page's hash chains the previous page's hash with the
    page's token ids, so equal prefixes give equal hash chains."""
    hashes: list[str] = []
    previous = b""
    for start in range(0, len(tokens) - len(tokens) % PAGE_TOKENS, PAGE_TOKENS):
        digest = hashlib.sha256(previous)
        digest.update(",".join(map(str, tokens[start:start + PAGE_TOKENS])).encode())
        previous = digest.digest()
        hashes.append(digest.hexdigest())
    return hashes


def page_keys(prefix_hash: str) -> list[str]:
    """MHA with tensor parallelism: one K and one V object per rank."""
    return [f"{prefix_hash}_{rank}_{kv}" for rank in range(TP_RANKS) for kv in "kv"]


def requests(count: int, turns: int, seed: int) -> Iterator[Request]:
    """Chats sharing a system prompt, turn by turn; each request is the whole history so far."""
    rng = random.Random(seed)
    system_prompt = [rng.randrange(32000) for _ in range(8 * PAGE_TOKENS)]
    histories = [list(system_prompt) for _ in range(count)]
    for turn in range(turns):
        for number, history in enumerate(histories):
            history += [rng.randrange(32000) for _ in range(rng.randint(2, 6) * PAGE_TOKENS)]
            yield Request(number + 1, turn + 1, page_hashes(history))
            history += [rng.randrange(32000) for _ in range(rng.randint(3, 10) * PAGE_TOKENS)]


@dataclass
class ServeReport:
    pages_requested: int = 0
    pages_reused: int = 0
    pages_stored: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    served: list[Request] = field(default_factory=list)

    def latest_chains(self) -> dict[int, list[str]]:
        """Each conversation's last request."""
        return {request.conversation: request.chain for request in self.served}


def serve(index: Index, conversations: int, turns: int, seed: int,
          log: bool = True) -> ServeReport:
    """Per request: match_prefix finds the pages already cached; the missing ones are stored
    with their parent page (batch_put_start, then batch_put_end of those written)."""
    report = ServeReport()
    for number, request in enumerate(requests(conversations, turns, seed), 1):
        chain = request.chain
        reused = index.match_prefix(chain)
        items = [(key, KV_OBJECT_BYTES, chain[i - 1] if i else None)
                 for i in range(reused, len(chain)) for key in page_keys(chain[i])]
        results = index.batch_put_start(items)
        written = [result.key for result in results if result.ok]
        report.refused.update(type(r.error).__name__ for r in results if r.error is not None)
        if written:
            index.batch_put_end(written)
        report.pages_requested += len(chain)
        report.pages_reused += reused
        report.pages_stored += len({key[:64] for key in written})
        report.served.append(request)
        if log:
            print(f"  request {number:3d}  chat {request.conversation} turn {request.turn}: "
                  f"{len(chain):3d} pages, {reused:3d} reused, {len(chain) - reused:3d} stored")
    return report


def is_fresh(index: Index) -> bool:
    """No objects, no nodes and no stored settings (but the shard count its first client
    records): nobody has used this namespace."""
    usage = index.usage()
    return not usage.objects and not usage.nodes and \
        set(index.client.hkeys(index.schema.settings)) <= {"shard_count"}


def reset(index: Index) -> int:
    """Delete every object of the namespace (leased and processing ones too) and settle its
    links; returns the nodes left (0 unless another client is writing)."""
    index.remove_all(force=True)
    index.resolve(grace_ms=0)
    return index.usage().nodes


def run(index: Index, conversations: int, turns: int, seed: int, depth: int, *,
        ctx: Context) -> int:
    """The whole demo on an index the caller checked is fresh (or reset); exit code. ctx:
    the index's Context, for the fsck that closes the demo."""
    url = index.url or ""
    where = "the in-process memory:// store (this process only)" \
        if url.startswith("memory:") else safe_url(url)
    index.set_config(capacity_bytes=DEMO_CAPACITY_BYTES)
    print(f"Serving {plural(conversations, 'chat')} x {plural(turns, 'turn')} on {where}, "
          f"namespace {index.namespace!r}, capacity {human_bytes(DEMO_CAPACITY_BYTES)}.\n"
          f"Pages of {PAGE_TOKENS} tokens; per page and rank (TP={TP_RANKS}) a K and a V "
          f"object of {human_bytes(KV_OBJECT_BYTES)} ({LAYERS} layers, {KV_HEADS} KV heads "
          f"x {HEAD_DIM}, fp16). Per request, match_prefix says how many leading pages are "
          "cached; the rest are stored:")
    report = serve(index, conversations, turns, seed)
    share = report.pages_reused / max(report.pages_requested, 1)
    print(f"\n{plural(len(report.served), 'request')}, {report.pages_requested} pages asked "
          f"for: {report.pages_reused} reused through match_prefix ({share:.0%}), "
          f"{report.pages_stored} stored" + "".join(
              f", {count} refused ({name})" for name, count in report.refused.items()) + ".")
    print_usage(index)

    views = Views(index)
    now_ms = index.redis_time_ms()
    first = report.served[0].chain
    print(f"\nThe tree under the first system-prompt page (depth {depth}):")
    print("\n".join(views.tree(first[0], max_depth=depth, max_nodes=60)))
    last = report.served[-1].chain
    page = last[-1]
    print(f"\nPrefix query: get_keys_by_prefix({short(page)}) is one HKEYS of the page's "
          "node, however big the store:")
    print("\n".join(f"  {key}" for key in index.get_keys_by_prefix(page)))
    print(f"match_prefix(the last request's {len(last)} pages) -> {index.match_prefix(last)}")
    print("\nOne node is ONE hash (its parent, children and objects) plus its score in its "
          "shard's leaf index:")
    node = index.get_node(page)
    if node is not None:
        print("\n".join(views.node(node, now_ms, show_replies=True)))
    evict_and_check(index, report, ctx)
    return 0


def print_usage(index: Index) -> None:
    usage = index.usage()
    print(f"Stats: {plural(usage.objects, 'object')} in {plural(usage.nodes, 'node')}, "
          f"{human_bytes(usage.used_bytes)} of {human_bytes(usage.capacity_bytes)} "
          f"({usage.ratio:.2%})")


def evict_and_check(index: Index, report: ServeReport, ctx: Context) -> None:
    settings = index.settings
    used = index.usage().used_bytes
    capacity = int(used / (settings.high_watermark + SQUEEZE_ABOVE_WATERMARK))
    print(f"\nEviction: set_config(capacity_bytes={capacity}) puts usage above the high "
          f"watermark ({settings.high_watermark:.0%}); evict() frees down to "
          f"{settings.eviction_target_ratio:.0%}, leaves first (oldest lease first), a parent "
          "joining the queue as soon as its last child goes.")
    index.set_config(capacity_bytes=capacity)
    chains = report.latest_chains()
    before = index.usage()
    job = index.evict()
    after = index.usage()
    print(f"  before: {plural(before.objects, 'object')} in {plural(before.nodes, 'node')}, "
          f"{before.ratio:.1%} of capacity")
    print(f"  after:  {plural(after.objects, 'object')} in {plural(after.nodes, 'node')}, "
          f"{after.ratio:.1%} of capacity ({job.stopped}: {plural(job.leaves, 'leaf', 'leaves')}"
          f", {plural(job.interior_nodes, 'interior node')}, {human_bytes(job.bytes)} in "
          f"{plural(job.rounds, 'round')})")
    print("  Each round took the oldest leaves (the tails of the chats) and their parents "
          "became leaves for the next;\n  match_prefix of each chat's last request (the "
          "shared prefixes stay usable):")
    for conversation, chain in chains.items():
        print(f"    chat {conversation}: {index.match_prefix(chain)}/{len(chain)} pages")
    fsck = check(ctx)
    state = "clean" if fsck.clean else ", ".join(f"{k}: {n}" for k, n in fsck.counts.items())
    print(f"  fsck: {state} ({plural(fsck.nodes, 'node')}, {plural(fsck.objects, 'object')}: "
          "every live page's parent is alive and lists it; counters and leaf index exact)")

"""The demo: SGLang-style page keys for a few multi-turn conversations, registered the way
an engine does it (match the prefix, store the pages that are missing)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from .index import Index
from .models import Usage

PAGE_TOKENS = 16
TP_RANKS = 2
KV_BYTES_PER_TOKEN_PER_RANK = 2 * 32 * 8 * 128  # fp16 x layers x kv heads per rank x head dim


@dataclass
class Conversation:
    """One chat: a shared system prompt, then user and assistant turns."""

    turns: list[list[int]] = field(default_factory=list)


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


def conversations(count: int, turns: int, seed: int) -> Iterator[tuple[int, list[int]]]:
    """Requests as (conversation number, full token history), turn by turn."""
    rng = random.Random(seed)
    system_prompt = [rng.randrange(32000) for _ in range(8 * PAGE_TOKENS)]
    histories = [list(system_prompt) for _ in range(count)]
    for _ in range(turns):
        for number, history in enumerate(histories):
            history += [rng.randrange(32000) for _ in range(rng.randint(2, 6) * PAGE_TOKENS)]
            yield number, list(history)
            history += [rng.randrange(32000) for _ in range(rng.randint(3, 10) * PAGE_TOKENS)]


@dataclass
class ServeReport:
    requests: int = 0
    pages_requested: int = 0
    pages_reused: int = 0
    pages_stored: int = 0
    chains: list[list[str]] = field(default_factory=list)


def serve(index: Index, conversation_count: int = 4, turns: int = 5, seed: int = 7) -> ServeReport:
    """Replays the conversations: for each request, match_prefix finds the pages already
    cached; the missing ones are stored with their parent page (put_start, put_end)."""
    report = ServeReport()
    for _, tokens in conversations(conversation_count, turns, seed):
        chain = page_hashes(tokens)
        reused = index.match_prefix(chain)
        missing = [(h, chain[i - 1] if i else None) for i, h in enumerate(chain) if i >= reused]
        items = [(key, KV_BYTES_PER_TOKEN_PER_RANK * PAGE_TOKENS, parent)
                 for prefix_hash, parent in missing for key in page_keys(prefix_hash)]
        if items:
            index.batch_put_start(items)
            index.batch_put_end([key for key, _, _ in items])
        report.requests += 1
        report.pages_requested += len(chain)
        report.pages_reused += reused
        report.pages_stored += len(missing)
        report.chains.append(chain)
    return report


def squeeze_and_evict(index: Index, over_watermark: float = 0.05) -> tuple[Usage, Usage, str]:
    """Shrink capacity so usage sits `over_watermark` above the high watermark, then let an
    RQ worker run the eviction job the way production does (in-process queue for the
    memory:// store). Returns usage before and after, and the job's summary."""
    from .workers.jobs import request_eviction
    from .workers.worker import run_worker

    used = index.usage().used_bytes
    index.set_config(capacity_bytes=int(used / (index.config.high_watermark + over_watermark)))
    before = index.usage()
    if index.url is not None and index.url.startswith("memory://") and not index.config.queue_url:
        index.set_config(queue_url="memory://demo-queue")
    if index.config.queue_url and index.url is not None:
        request_eviction(index)
        run_worker(index.config.queue_url, burst=True)
        summary = "evicted by an RQ worker (burst mode)"
    else:
        summary = index.evict().summary()
    return before, index.usage(), summary

"""The shape of the benchmarks' trees: chat-shaped pages and their keys. Imports nothing of
mooncake_redis, so benchmarks/versions.py can build the same trees for any checkout."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Iterator
from functools import partial

OBJECT_BYTES = 1 << 20
"""A 16-token page of a mid-size model at fp16, one K or V half on one rank."""

KEYS_PER_PAGE = 2
"""MHA keys: `<hash>_0_k` and `<hash>_0_v` (one rank), so a tree of N objects has N/2 nodes."""

BUILD_PAGES = 500
"""Pages per batch_put_start call while building trees (1,000 objects per call)."""

SYSTEM_PROMPTS = 16
SYSTEM_PAGES = 8
BRANCH_PROBABILITY = 0.25
"""Share of conversations that branch off an earlier chat (a regenerated or edited turn)."""

Page = tuple[str, "str | None"]
"""(prefix hash, parent hash or None for a root), parents always before children."""


def random_hash(rng: random.Random, shard: str | None = None) -> str:
    """A random 64-hex page hash; with `shard`, one whose first two digits (its shard) are
    those: all such pages share one shard, so a batch of them is one script call a step."""
    digest = f"{rng.getrandbits(256):064x}"
    return shard + digest[2:] if shard else digest


def chat_pages(seed: int, shard: str | None = None) -> Iterator[Page]:
    """An endless chat-shaped tree: 16 system prompts of 8 pages; each conversation starts
    at a system prompt (or, one in four, branches off a page of a recent conversation)
    and runs 1-8 turns of 2-10 pages, each page the child of the one before. With
    `shard`, every page hash falls in that shard."""
    rng = random.Random(seed)
    random_page = partial(random_hash, rng, shard=shard)
    system_tips: dict[int, str] = {}
    recent: deque[str] = deque(maxlen=4096)
    while True:
        if recent and rng.random() < BRANCH_PROBABILITY:
            parent: str | None = recent[rng.randrange(len(recent))]
        else:
            prompt = rng.randrange(SYSTEM_PROMPTS)
            if prompt not in system_tips:
                parent = None
                for _ in range(SYSTEM_PAGES):
                    page = random_page()
                    yield page, parent
                    parent = page
                system_tips[prompt] = page
            parent = system_tips[prompt]
        for _ in range(rng.randint(1, 8) * rng.randint(2, 10)):
            page = random_page()
            yield page, parent
            recent.append(page)
            parent = page


def chain_pages(rng: random.Random, length: int) -> list[Page]:
    """One conversation of `length` pages under a fresh root."""
    pages: list[Page] = []
    parent: str | None = None
    for _ in range(length):
        page = random_hash(rng)
        pages.append((page, parent))
        parent = page
    return pages


def page_keys(prefix_hash: str) -> list[str]:
    return [f"{prefix_hash}_0_{half}" for half in "kv"[:KEYS_PER_PAGE]]


def put_items(pages: Iterable[Page]) -> list[tuple[str, int, str | None]]:
    """batch_put_start items for pages: every key of each page, with the page's parent."""
    return [(key, OBJECT_BYTES, parent) for page, parent in pages for key in page_keys(page)]

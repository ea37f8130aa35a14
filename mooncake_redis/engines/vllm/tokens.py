"""The token-content hash of a block: what a router computes from a prompt's token ids
alone, without the engine's hashing code or seed.

    token_block_hashes(token_ids, block_size, parent=None)

cuts the tokens into blocks of block_size (a shorter tail is no block) and gives each
block xxh3-64 of its token ids as little-endian uint32, seeded with the hash of the
block before it (`parent` for the first; 0 for the first block of a sequence), so each
hash names the whole prefix up to its block, as the block hashes of vLLM, SGLang and
Dynamo's router do. `token_prefix_hash` is the node that stands for such a hash in the
tree: its 16 hex digits, then 47 zeros and a 1 (never a vLLM int block hash's node,
which ends in 48 zeros).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache

ROOT_SEED = 0
"""The seed of a sequence's first block."""
_PADDING = "0" * 47 + "1"


def token_block_hashes(token_ids: Sequence[int], block_size: int,
                       parent: int | None = None) -> list[int]:
    """The chained token hash of each whole block of token_ids (see the module doc)."""
    import xxhash  # the vllm extra, imported only to hash tokens: `pods` by hash needs none

    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    pack = _packer(block_size).pack
    hashes = []
    seed = ROOT_SEED if parent is None else parent
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        seed = xxhash.xxh3_64_intdigest(pack(*token_ids[start:start + block_size]), seed)
        hashes.append(seed)
    return hashes


def token_prefix_hash(token_hash: int) -> str:
    """The prefix hash of the tree node that stands for a token hash."""
    return f"{token_hash:016x}{_PADDING}"


@lru_cache(maxsize=16)
def _packer(block_size: int) -> struct.Struct:
    return struct.Struct(f"<{block_size}I")

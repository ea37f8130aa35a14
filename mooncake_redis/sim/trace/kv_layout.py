"""How many bytes a KV page takes, and which objects store it on the service."""

from __future__ import annotations

HEAD_DIM = 128
FP16_BYTES = 2
KV_SUFFIXES = ("_0_k", "_0_v")
"""MHA keys of tensor-parallel rank 0: one K and one V object per page."""


def kv_object_bytes(page_tokens: int, layers: int, heads: int) -> int:
    """fp16 K (or V) of every layer and head for the page's tokens, as one object."""
    return page_tokens * layers * heads * HEAD_DIM * FP16_BYTES


def kv_page_bytes(page_tokens: int, layers: int, heads: int) -> int:
    """Both objects of a page (K and V)."""
    return kv_object_bytes(page_tokens, layers, heads) * len(KV_SUFFIXES)

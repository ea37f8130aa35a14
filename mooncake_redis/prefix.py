"""The prefix rule (object key -> prefix hash) and the shard rule (prefix hash -> shard)."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable

import blake3

from .errors import ConfigurationError

PREFIX_HASH_LENGTH = 64
SHARD_COUNT = 256

PrefixExtractor = Callable[[str], str]

_HEX64 = re.compile(r"[0-9a-f]{64}")


def rfc_prefix(key: str) -> str:
    """The Radix Tree Index RFC's rule: if the key's first `_` is at position 64, the
    prefix hash is the 64 characters before it; otherwise the whole key is its own prefix.

    Covers MLA `<hash>`, SGLang MLA `<hash>__k` / `<hash>_<pp>_k`, MHA `<hash>_<rank>_k`
    and MHA+TP `<hash>_<layer>_<k|v>_tp_<rank>`.
    """
    if key.find("_") == PREFIX_HASH_LENGTH:
        return key[:PREFIX_HASH_LENGTH]
    return key


def shard_of(prefix_hash: str) -> str:
    """Two lowercase hex digits: the hash's own first two when it is a 64-hex digest
    (uniform already), else the first two of blake3(prefix_hash)."""
    if _HEX64.fullmatch(prefix_hash):
        return prefix_hash[:2]
    return blake3.blake3(prefix_hash.encode()).hexdigest()[:2]


def all_shards() -> list[str]:
    return [f"{i:02x}" for i in range(SHARD_COUNT)]


BUILTIN_EXTRACTORS: dict[str, PrefixExtractor] = {"rfc": rfc_prefix}


def load_extractor(spec: str) -> PrefixExtractor:
    """`rfc` (the default), or `package.module:function` for engines that put a model or
    tag in front of the hash. The function maps an object key to its prefix hash."""
    if spec in BUILTIN_EXTRACTORS:
        return BUILTIN_EXTRACTORS[spec]
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(
            f"prefix_extractor {spec!r} is neither a built-in ({', '.join(BUILTIN_EXTRACTORS)}) "
            "nor 'package.module:function'"
        )
    try:
        extractor = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ConfigurationError(f"cannot load prefix_extractor {spec!r}: {error}") from error
    if not callable(extractor):
        raise ConfigurationError(f"prefix_extractor {spec!r} is not callable")
    return extractor

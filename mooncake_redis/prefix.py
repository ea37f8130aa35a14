"""The prefix rule (object key -> prefix hash) and the shard rule (prefix hash -> shard).

Extractors are chosen by NAME: the ones shipped here, or ones a program registers in its
own process with register_extractor. A name read from Redis is only ever looked up in
this registry; nothing read from Redis is imported or called.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

import blake3

from .errors import ConfigurationError, InvalidArgument

PREFIX_HASH_LENGTH = 64
LEGACY_SHARD_COUNT = 256
"""The shard count of namespaces stored before it was a setting (data model v2)."""
NEW_SHARD_COUNT = 16
"""The shard count a new namespace gets (docs/ARCHITECTURE.md, Shards)."""
SHARD_COUNTS = tuple(1 << i for i in range(9))
"""The shard counts a namespace may have: powers of two up to 256, so every shard gets
an equal share of uniform hashes."""


@dataclass(frozen=True)
class ShardLayout:
    """Where a namespace's keys live: its shard count, and how many hex digits its shards'
    tags have. Read off the keys themselves (shard_layout.py), never off a stored value.

    Tags of one digit, "0".."f", are the 16 shards of a namespace made by 0.2 (a node's
    shard is its hash's first hex digit); tags of two, "00".."ff", those of 0.1 and of
    wider namespaces, the top bits of the hash's first byte (16 shards: "00".."0f"). The
    two never name the same key, so a namespace's keys say which it has."""

    shard_count: int
    tag_width: int

    @property
    def shards(self) -> tuple[str, ...]:
        return shard_names(self.shard_count, self.tag_width)


V4_LAYOUT = ShardLayout(NEW_SHARD_COUNT, 1)
"""The layout of a namespace made by this release with the default shard count."""


def layout_for(shard_count: int) -> ShardLayout:
    """The layout a new namespace of `shard_count` shards is made with: one-digit tags for
    16 (the default), two-digit tags for any other count."""
    return V4_LAYOUT if shard_count == NEW_SHARD_COUNT else ShardLayout(shard_count, 2)


@functools.cache
def shard_names(shard_count: int, tag_width: int = 2) -> tuple[str, ...]:
    """The shards of a layout, in hex: "0".."f" (one digit, 16 shards), or "00", "01", ..."""
    if tag_width == 1:
        return tuple(f"{i:x}" for i in range(shard_count))
    return tuple(f"{i:02x}" for i in range(shard_count))


ALL_SHARDS = shard_names(LEGACY_SHARD_COUNT)

PrefixExtractor = Callable[[str], str]

_HEX_DIGITS = b"0123456789abcdef"
_TAGGED = re.compile(r"([^:/|{}\s]{1,64}[:/])([0-9a-f]{64})")


def rfc_prefix(key: str) -> str:
    """The Radix Tree Index RFC's rule: if the key's first `_` is at position 64, the
    prefix hash is the 64 characters before it; otherwise the whole key is its own prefix.

    Covers MLA `<hash>`, SGLang MLA `<hash>__k` / `<hash>_<pp>_k`, MHA `<hash>_<rank>_k`
    and MHA+TP `<hash>_<layer>_<k|v>_tp_<rank>`.
    """
    if key.find("_") == PREFIX_HASH_LENGTH:
        return key[:PREFIX_HASH_LENGTH]
    return key


def rfc_split_all(keys: list[str]) -> list[tuple[str, str, str]]:
    """(key, prefix hash, suffix) of each key under the RFC rule: `rfc_prefix` and the
    split in one comprehension, for keys already known to be plain str."""
    return [(key, key[:PREFIX_HASH_LENGTH], key[PREFIX_HASH_LENGTH:])
            if key.find("_") == PREFIX_HASH_LENGTH else (key, key, "") for key in keys]


def tagged_prefix(key: str) -> str:
    """For engines that put a model or tenant tag in front of the hash:
    `<tag>:<hash>...` or `<tag>/<hash>...` (tag of 1-64 characters). The prefix is the tag
    with the 64-hex hash, so equal hashes of different models stay apart; keys without a
    tag follow the RFC rule."""
    match = _TAGGED.match(key)
    if match is None or (len(key) > match.end() and key[match.end()] != "_"):
        return rfc_prefix(key)
    return match.group(0)


def is_tagged_digest(text: str) -> bool:
    match = _TAGGED.fullmatch(text)
    return match is not None


@dataclass(frozen=True)
class Extractor:
    """A named prefix rule: key -> prefix hash, and which texts are well-formed hashes
    (what a caller may pass as a parent or node hash)."""

    name: str
    prefix: PrefixExtractor
    is_hash: Callable[[str], bool]
    hash_form: str
    """How a well-formed hash looks, for error messages."""
    all_hashes: Callable[[list[str]], bool] | None = None
    """Optional: whether every text of a list is a well-formed hash, at once (a long
    match_prefix chain checked in C, not text by text); False says only "check each"."""
    split_all: Callable[[list[str]], list[tuple[str, str, str]]] | None = None
    """Optional: (key, prefix hash, suffix) of every key of a list of plain str at once,
    as `prefix` and `split_key` would give them one by one."""


def is_digest(prefix_hash: str) -> bool:
    """Whether a text is 64 lower-case hex digits, as all_digests checks a list, without
    the regex engine: the hex digits deleted from its bytes leave nothing."""
    return len(prefix_hash) == PREFIX_HASH_LENGTH and prefix_hash.isascii() and \
        not prefix_hash.encode("ascii").translate(None, _HEX_DIGITS)


def all_digests(texts: list[str]) -> bool:
    """Whether every text is a str of 64 lower-case hex digits: their types and lengths in
    one pass each, then their characters joined, in C (bytes.translate deletes the hex
    digits; nothing may be left)."""
    if set(map(type, texts)) != {str} or set(map(len, texts)) != {PREFIX_HASH_LENGTH}:
        return False
    joined = "".join(texts)
    return joined.isascii() and not joined.encode("ascii").translate(None, _HEX_DIGITS)


_EXTRACTORS: dict[str, Extractor] = {
    "rfc": Extractor("rfc", rfc_prefix, is_digest,
                     "64 lower-case hex digits", all_digests, rfc_split_all),
    "tagged": Extractor("tagged", tagged_prefix, is_tagged_digest,
                        "<tag>:<64 lower-case hex> or <tag>/<64 lower-case hex>"),
}
SHIPPED_EXTRACTORS = tuple(_EXTRACTORS)


def register_extractor(name: str, extractor: PrefixExtractor,
                       is_hash: Callable[[str], bool] | None = None) -> None:
    """Make an extractor available BY NAME in this process (settings store only names).
    It must map an object key to a prefix of that key; is_hash (default: the extractor
    maps the text to itself) says which texts callers may pass as hashes."""
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_.-]{0,63}", name):
        raise ConfigurationError(f"extractor name {name!r} must be 1-64 characters of a-z, "
                                 "0-9, '_', '.', '-', starting with a letter")
    if name in SHIPPED_EXTRACTORS:
        raise ConfigurationError(f"{name!r} is a shipped extractor; pick another name")
    if not callable(extractor):
        raise ConfigurationError(f"extractor {name!r} is not callable")
    check = is_hash or (lambda text: extractor(text) == text)
    _EXTRACTORS[name] = Extractor(name, extractor, check, f"a hash of the {name!r} rule")


def extractor_named(name: str) -> Extractor:
    try:
        return _EXTRACTORS[name]
    except KeyError:
        raise ConfigurationError(
            f"prefix_extractor {name!r} is not known in this process: shipped ones are "
            f"{', '.join(SHIPPED_EXTRACTORS)}; others must be registered with "
            "mooncake_redis.register_extractor before opening the index") from None


def shard_of(prefix_hash: str, shard_count: int = LEGACY_SHARD_COUNT,
             tag_width: int = 2) -> str:
    """The tag of the shard of `shard_count` a prefix's node lives in, from the hash's own
    first byte when it is a 64-hex digest (uniform already), else from the first byte of
    blake3(prefix_hash): with 256 shards that byte, with fewer its top bits, as two hex
    digits ("00"-"0f" for 16), or with tag_width 1 (16 shards only) as one ("0"-"f")."""
    return shard_finder(shard_count, tag_width)(prefix_hash)


@functools.cache
def digest_tags(shard_count: int, tag_width: int = 2) -> dict[str, str]:
    """The shard tag of a 64-hex digest by its first two digits, in one layout."""
    if tag_width == 1 and shard_count != NEW_SHARD_COUNT:
        raise ValueError("one-digit shard tags name 16 shards")
    width = f"0{tag_width}x"
    return {f"{byte:02x}": format(byte * shard_count // LEGACY_SHARD_COUNT, width)
            for byte in range(LEGACY_SHARD_COUNT)}


def shard_finder(shard_count: int, tag_width: int = 2) -> Callable[[str], str]:
    """shard_of for one layout, as a function of the hash alone with a cache keyed by the
    hash itself (the write paths ask for a node's shard several times a call)."""
    shards = digest_tags(shard_count, tag_width)

    def shard(prefix_hash: str) -> str:
        if is_digest(prefix_hash):
            return shards[prefix_hash[:2]]
        return shards[blake3.blake3(prefix_hash.encode()).hexdigest()[:2]]

    return TextMemo(shard).__getitem__


class TextMemo(dict[str, str]):
    """A function of a text, remembered per text: a hit is a dict lookup in C; a miss
    computes it (`__missing__`), and the memo is emptied whole when it holds `limit`
    texts. Not functools.lru_cache: its entries are linked lists the garbage collector
    tracks, and every full collection walked 65,536 of them (a third of a batch put's
    client CPU, measured)."""

    def __init__(self, compute: Callable[[str], str], limit: int = 1 << 16):
        super().__init__()
        self.compute = compute
        self.limit = limit

    def __missing__(self, text: str) -> str:
        if len(self) >= self.limit:
            self.clear()
        value = self[text] = self.compute(text)
        return value


def split_key(extractor: PrefixExtractor, key: str) -> tuple[str, str]:
    """(prefix hash, suffix) of an object key; the suffix names the object in its node."""
    prefix_hash = extractor(key)
    if not isinstance(prefix_hash, str) or not prefix_hash or not key.startswith(prefix_hash):
        raise InvalidArgument(f"the prefix extractor mapped key {key!r} to {prefix_hash!r}, "
                              "which is not a non-empty prefix of the key", key=key)
    return prefix_hash, key[len(prefix_hash):]

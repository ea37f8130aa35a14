"""Key encodings: fixed width, order-preserving, reversible, and range-checked."""

from __future__ import annotations

import random

import pytest

from mooncake_redis.sim.indexes.keys import (
    MAX_HEAD,
    MAX_LAYER,
    MAX_POSITION,
    MAX_SEQUENCE,
    STRING_KEY_LENGTH,
    CacheKey,
    format_key,
    pack_key,
    packed_prefix,
    parse_key,
    string_prefix,
    unpack_key,
    validate_key,
)


def _random_keys(count: int, seed: int) -> list[CacheKey]:
    rng = random.Random(seed)
    return [
        CacheKey(
            rng.randint(0, MAX_SEQUENCE),
            rng.randint(0, MAX_LAYER),
            rng.randint(0, MAX_HEAD),
            rng.choice([rng.randint(0, 20), rng.randint(0, MAX_POSITION)]),
        )
        for _ in range(count)
    ]


def test_string_key_is_zero_padded_to_a_fixed_width() -> None:
    assert format_key(CacheKey(1, 12, 8, 456)) == "0001:012:08:000456"
    assert {len(format_key(key)) for key in _random_keys(500, 1)} == {STRING_KEY_LENGTH}


@pytest.mark.parametrize("encode", [format_key, pack_key], ids=["string", "packed"])
def test_encoded_order_equals_numeric_order(encode) -> None:  # type: ignore[no-untyped-def]
    keys = _random_keys(2000, 2)
    assert sorted(keys, key=encode) == sorted(keys)


def test_both_encodings_round_trip() -> None:
    for key in _random_keys(500, 3) + [CacheKey(MAX_SEQUENCE, MAX_LAYER, MAX_HEAD, MAX_POSITION)]:
        assert parse_key(format_key(key)) == key
        assert unpack_key(pack_key(key)) == key
        assert 0 <= pack_key(key) < 2**64


def test_prefixes_match_exactly_the_keys_of_their_sequence_layer_and_head() -> None:
    key = CacheKey(7, 12, 3, 999)
    for layer, head in [(None, None), (12, None), (12, 3)]:
        assert format_key(key).startswith(string_prefix(7, layer, head))
        prefix = packed_prefix(7, layer, head)
        assert pack_key(key) >> (64 - prefix.length) == prefix.value
    other_head = CacheKey(7, 12, 4, 999)
    assert not format_key(other_head).startswith(string_prefix(7, 12, 3))
    prefix = packed_prefix(7, 12, 3)
    assert pack_key(other_head) >> (64 - prefix.length) != prefix.value


@pytest.mark.parametrize(
    "key",
    [
        CacheKey(MAX_SEQUENCE + 1, 0, 0, 0),
        CacheKey(0, MAX_LAYER + 1, 0, 0),
        CacheKey(0, 0, MAX_HEAD + 1, 0),
        CacheKey(0, 0, 0, MAX_POSITION + 1),
        CacheKey(0, 0, 0, -1),
    ],
)
def test_out_of_range_fields_are_rejected_by_name(key: CacheKey) -> None:
    with pytest.raises(ValueError, match="is outside"):
        validate_key(key)

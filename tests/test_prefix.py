"""The RFC's prefix rule on every key format engines use, and the shard rule."""

from __future__ import annotations

import blake3
import pytest
from helpers import page

from mooncake_redis import ConfigurationError, Index
from mooncake_redis.prefix import load_extractor, rfc_prefix, shard_of

H = page("p")


@pytest.mark.parametrize(
    "key",
    [
        H,  # MLA
        f"{H}__k",  # SGLang MLA
        f"{H}_3_k",  # SGLang MLA with pipeline parallel rank
        f"{H}_0_k",  # MHA rank 0, K
        f"{H}_7_v",  # MHA rank 7, V
        f"{H}_31_k_tp_4",  # MHA + TP: layer 31, K, TP rank 4
    ],
)
def test_engine_key_formats_map_to_their_page_hash(key: str) -> None:
    assert rfc_prefix(key) == H


@pytest.mark.parametrize(
    "key",
    [
        "plain-object",
        f"model_{H}_0_k",  # a tag in front: first '_' is not at 64
        H[:63] + "_0_k",  # hash one character short
        H + "x_0_k",  # 65 characters before the first '_'
    ],
)
def test_other_keys_are_their_own_prefix(key: str) -> None:
    assert rfc_prefix(key) == key


def test_shard_of_a_digest_is_its_first_two_hex_digits() -> None:
    assert shard_of("ab" + "0" * 62) == "ab"


def test_shard_of_anything_else_hashes_it_with_blake3() -> None:
    assert shard_of("plain-object") == blake3.blake3(b"plain-object").hexdigest()[:2]
    assert shard_of("AB" + "0" * 62) == blake3.blake3(("AB" + "0" * 62).encode()).hexdigest()[:2]


def strip_model_tag(key: str) -> str:
    return rfc_prefix(key.split("@", 1)[1])


def test_a_custom_extractor_is_loaded_by_import_path(make_index) -> None:
    index: Index = make_index(prefix_extractor="test_prefix:strip_model_tag")
    key = f"llama3@{H}_0_k"
    assert index.prefix_of(key) == H
    index.put_start(key, 10)
    assert index.get_keys_by_prefix(H) == [key]


@pytest.mark.parametrize(
    "spec", ["nope", "no_such_module_xyz:f", "test_prefix:missing", "test_prefix:H"])
def test_a_bad_extractor_is_a_configuration_error(spec: str) -> None:
    with pytest.raises(ConfigurationError):
        load_extractor(spec)

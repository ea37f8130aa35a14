"""The RFC's prefix rule on every key format engines use, the tagged rule, extractors chosen
by NAME (never imported from a stored string), and the shard rule."""

from __future__ import annotations

import functools

import blake3
import hypothesis
import pytest
from helpers import page
from hypothesis import strategies as st

from mooncake_redis import ConfigurationError, Index, InvalidArgument, register_extractor
from mooncake_redis.context import Context
from mooncake_redis.prefix import (
    SHIPPED_EXTRACTORS,
    extractor_named,
    rfc_prefix,
    shard_of,
    split_key,
    tagged_prefix,
)

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
    assert split_key(rfc_prefix, key) == (H, key[64:])


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
    assert split_key(rfc_prefix, key) == (key, "")


@pytest.mark.parametrize(
    "key, prefix",
    [
        (f"llama3:{H}_0_k", f"llama3:{H}"),
        (f"tenant-7/{H}", f"tenant-7/{H}"),
        (f"{H}_0_k", H),  # no tag: the RFC rule
        (f"llama3:{H}x", f"llama3:{H}x"),  # not a tag and a hash: its own prefix
        ("t" * 65 + f":{H}_0_k", "t" * 65 + f":{H}_0_k"),  # tag longer than 64
    ],
)
def test_the_tagged_rule_keeps_equal_hashes_of_different_models_apart(key: str,
                                                                       prefix: str) -> None:
    assert tagged_prefix(key) == prefix


def test_shard_of_a_digest_is_its_first_two_hex_digits() -> None:
    assert shard_of("ab" + "0" * 62) == "ab"


def test_shard_of_anything_else_hashes_it_with_blake3() -> None:
    assert shard_of("plain-object") == blake3.blake3(b"plain-object").hexdigest()[:2]
    assert shard_of("AB" + "0" * 62) == blake3.blake3(("AB" + "0" * 62).encode()).hexdigest()[:2]
    assert shard_of(f"llama3:{H}") == blake3.blake3(f"llama3:{H}".encode()).hexdigest()[:2]


def strip_model_tag(key: str) -> str:
    """A custom rule: `<model>@<key>`, the prefix being the model tag with the RFC hash."""
    model, _, rest = key.partition("@")
    return f"{model}@{rfc_prefix(rest)}"


register_extractor("test-model-at", strip_model_tag)


def test_a_registered_extractor_is_chosen_by_name(make_index) -> None:
    index: Index = make_index(prefix_extractor="test-model-at")
    key = f"llama3@{H}_0_k"
    assert index.ctx.split(key) == (f"llama3@{H}", "_0_k")
    index.put_start(key, 10)
    parent = f"llama3@{page('parent')}"
    index.put_start(f"{parent}_0_k", 1)
    index.put_start(f"llama3@{page('child')}_0_k", 1, parent_block_hash=parent)
    assert index.get_keys_by_prefix(f"llama3@{H}") == [key]
    assert index.client.hget(index.ctx.schema.settings, "prefix_extractor") == "test-model-at"
    with pytest.raises(InvalidArgument, match="not a prefix hash"):
        index.put_start(f"llama3@{page('x')}_0_k", 1, parent_block_hash=H)  # not its rule


def test_the_tagged_extractor_is_shipped(make_index) -> None:
    index: Index = make_index(prefix_extractor="tagged")
    key = f"llama3:{H}_0_k"
    index.put_start(key, 1)
    index.put_start(f"qwen:{H}_0_k", 2)  # same page hash, another model: another node
    assert index.get_keys_by_prefix(f"llama3:{H}") == [key]
    assert index.get_node(f"qwen:{H}") is not None


@pytest.mark.parametrize(
    "name",
    ["nope", "os:system", "test_prefix:strip_model_tag", "mooncake_redis.prefix:rfc_prefix",
     "RFC", " rfc", ""])
def test_an_unknown_extractor_name_is_a_configuration_error(name: str, make_index) -> None:
    with pytest.raises(ConfigurationError, match="not known in this process"):
        extractor_named(name)
    with pytest.raises(ConfigurationError):
        make_index(namespace="bad-extractor", prefix_extractor=name)


@pytest.mark.parametrize("name, extractor", [
    ("rfc", strip_model_tag),  # a shipped name cannot be replaced
    ("Bad Name", strip_model_tag),
    ("x" * 65, strip_model_tag),
    ("os:system", strip_model_tag),
    ("not-callable", "module:function"),
])
def test_register_extractor_refuses_bad_registrations(name: str, extractor: object) -> None:
    with pytest.raises(ConfigurationError):
        register_extractor(name, extractor)  # type: ignore[arg-type]
    assert extractor_named("rfc").prefix is rfc_prefix
    assert SHIPPED_EXTRACTORS == ("rfc", "tagged")


def test_an_extractor_must_return_a_prefix_of_the_key(make_index) -> None:
    register_extractor("test-not-a-prefix", lambda key: "elsewhere")
    index: Index = make_index(prefix_extractor="test-not-a-prefix")
    with pytest.raises(InvalidArgument, match="not a non-empty prefix"):
        index.put_start("some-key", 1)


@pytest.mark.parametrize("key", ["plain-object", f"model-x_{H}", f"model_{H}_0_k",
                                 H[:63] + "_0_k", H])
def test_every_query_accepts_a_key_that_is_its_own_prefix(index: Index, key: str) -> None:
    """RFC, Design 4: a non-standard key is its own prefix, so its node is named by it."""
    index.put_start(key, 3)
    assert index.get_keys_by_prefix(key) == [key]
    node = index.get_node(key)
    assert node is not None and node.keys == [key]
    assert index.get_subtree_keys(key) == [key]
    assert index.match_prefix([key]) == 0  # still processing
    index.put_end(key)
    assert index.match_prefix([key]) == 1


def test_a_query_by_an_object_key_names_its_prefix(index: Index) -> None:
    with pytest.raises(InvalidArgument, match=f"its prefix is {H}"):
        index.get_keys_by_prefix(f"{H}_0_k")


@functools.cache
def split_context() -> Context:
    return Index.from_url("memory://split-all", namespace="split", max_key_length=200).ctx


_KEY_PARTS = st.sampled_from([H, page("q"), H.upper(), H[:63], "_", "_0_k", "__k", "k", "é",
                              "x" * 300, "", "_tp_3"])


@hypothesis.settings(max_examples=150, deadline=None, derandomize=True)
@hypothesis.given(st.lists(st.one_of(st.lists(_KEY_PARTS, max_size=3).map("".join),
                                     st.sampled_from([None, 7, b"k"])), max_size=6))
@hypothesis.example([f"{H}_0_k", f"{H}k_0_k", f"{H.upper()}_0_k", f"_{H}", H, "k"])
@hypothesis.example([f"{H}_0_k", f"{H}_é"])
@hypothesis.example([f"{H}_0_k", "", f"{H}_0_v"])
def test_split_all_answers_what_split_answers_key_by_key(keys: list[object]) -> None:
    """The whole-list fast path (plain_texts, then Extractor.split_all) gives exactly the
    targets, or the first error, that splitting each key on its own gives."""
    ctx = split_context()

    def one_by_one() -> list[tuple[str, str, str]]:
        return [(key, *ctx.split(key)) for key in keys]

    try:
        expected: object = one_by_one()
    except InvalidArgument as error:
        expected = str(error)
    try:
        got: object = ctx.split_all(keys)
    except InvalidArgument as error:
        got = str(error)
    assert got == expected

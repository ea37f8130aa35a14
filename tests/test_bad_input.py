"""Every bad input of docs/RELIABILITY.md's table: the error it gets, and nothing written.
(Redis down, wrong password and ACL refusals are in test_security.py.)"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import page, snapshot

from mooncake_redis import (
    ConfigurationError,
    CycleDetected,
    Index,
    InvalidArgument,
    InvalidObjectState,
    MooncakeRedisError,
    ObjectAlreadyExists,
    ObjectNotFound,
    ObjectNotReady,
    ParentConflict,
)

A, B, C = page("bad-A"), page("bad-B"), page("bad-C")
DONE, PROCESSING = f"{A}_0_k", f"{B}_0_k"
SEGMENT = "bad-input-segment"

BAD_INPUTS: dict[str, tuple[type[MooncakeRedisError], Callable[[Index], object]]] = {
    "key not a str": (InvalidArgument, lambda ix: ix.put_start(42, 1)),
    "key as bytes": (InvalidArgument, lambda ix: ix.put_start(b"k", 1)),
    "empty key": (InvalidArgument, lambda ix: ix.put_start("", 1)),
    "key over max_key_length": (InvalidArgument, lambda ix: ix.put_start("k" * 5000, 1)),
    "key not valid UTF-8": (InvalidArgument, lambda ix: ix.put_start("bad\udcff", 1)),
    "negative size": (InvalidArgument, lambda ix: ix.put_start("k", -1)),
    "fractional size": (InvalidArgument, lambda ix: ix.put_start("k", 1.5)),
    "bool size": (InvalidArgument, lambda ix: ix.put_start("k", True)),
    "size over max_object_size": (InvalidArgument, lambda ix: ix.put_start("k", 1 << 60)),
    "parent not a str": (InvalidArgument, lambda ix: ix.put_start("k", 1, 7)),
    "pin not a bool": (InvalidArgument, lambda ix: ix.put_start("k", 1, soft_pin="yes")),
    "duplicate key in a batch": (InvalidArgument,
                                 lambda ix: ix.batch_put_start([("k", 1, None), ("k", 1, None)])),
    "one bad item in a batch": (InvalidArgument,
                                lambda ix: ix.batch_put_start([("k", 1, None), ("j", -1, None)])),
    "regex that does not compile": (InvalidArgument, lambda ix: ix.remove_by_regex("(")),
    "regex not a str": (InvalidArgument, lambda ix: ix.remove_by_regex(None)),
    "own prefix as parent": (CycleDetected, lambda ix: ix.put_start(f"{C}_0_k", 1, C)),
    "node as its own parent": (CycleDetected, lambda ix: ix.register_radix_tree_node(A, A)),
    "cycle": (CycleDetected, lambda ix: ix.register_radix_tree_node(A, B)),
    "conflicting parent": (ParentConflict, lambda ix: ix.put_start(f"{B}_1_k", 1, C)),
    "put_start of a key another writer stored": (
        ObjectAlreadyExists, lambda ix: other_writer(ix).put_start(DONE, 1)),
    "put_end of an unknown key": (ObjectNotFound, lambda ix: ix.put_end("unknown")),
    "put_end of another writer's object": (
        InvalidObjectState, lambda ix: other_writer(ix).put_end(PROCESSING)),
    "put_revoke of another writer's object": (
        InvalidObjectState, lambda ix: other_writer(ix).put_revoke(PROCESSING)),
    "put_revoke of an unknown key": (ObjectNotFound, lambda ix: ix.put_revoke("unknown")),
    "put_revoke of a complete key": (InvalidObjectState, lambda ix: ix.put_revoke(DONE)),
    "get while processing": (ObjectNotReady, lambda ix: ix.get(PROCESSING)),
    "remove of an unknown key": (ObjectNotFound, lambda ix: ix.remove("unknown")),
    "remove while processing": (InvalidObjectState, lambda ix: ix.remove(PROCESSING)),
    "register a key of another prefix": (
        InvalidArgument, lambda ix: ix.register_radix_tree_node(C, None, [DONE])),
    "register an unknown key": (
        ObjectNotFound, lambda ix: ix.register_radix_tree_node(C, None, [f"{C}_0_k"])),
    "register nothing for an absent node": (
        InvalidArgument, lambda ix: ix.register_radix_tree_node(C, A, [])),
    "register keys as one str": (
        InvalidArgument, lambda ix: ix.register_radix_tree_node(A, None, DONE)),
    "match_prefix with a non-str": (InvalidArgument, lambda ix: ix.match_prefix([A, None])),
    "match_prefix with one string": (InvalidArgument, lambda ix: ix.match_prefix(A)),
    "upper-case parent hash": (InvalidArgument,
                               lambda ix: ix.put_start(f"{C}_0_k", 1, A.upper())),
    "short parent hash": (InvalidArgument, lambda ix: ix.put_start(f"{C}_0_k", 1, A[:40])),
    "parent hash with spaces": (InvalidArgument,
                                lambda ix: ix.put_start(f"{C}_0_k", 1, f" {A[1:]}")),
    "key without a hash linked to a parent": (
        InvalidArgument, lambda ix: ix.put_start("plain-key", 1, A)),
    "batch item of the wrong shape": (InvalidArgument,
                                      lambda ix: ix.batch_put_start([("k",)])),
    "batch of one string": (InvalidArgument, lambda ix: ix.batch_put_start("k")),
    "keys=None": (InvalidArgument, lambda ix: ix.batch_get(None)),
    "size as large as 2**63": (InvalidArgument, lambda ix: ix.put_start("k", 1 << 63)),
    "empty regex": (InvalidArgument, lambda ix: ix.remove_by_regex("")),
    "batch_is_exist with a non-str": (InvalidArgument, lambda ix: ix.batch_is_exist([1])),
    "negative subtree depth": (InvalidArgument, lambda ix: ix.get_subtree_keys(A, -1)),
    "eviction target out of range": (InvalidArgument, lambda ix: ix.evict(target_ratio=1.5)),
    "negative max_nodes of an unmount": (
        InvalidArgument, lambda ix: ix.unmount_segment(SEGMENT, max_nodes=-1)),
    "max_nodes 0 of an unmount": (
        InvalidArgument, lambda ix: ix.unmount_segment(SEGMENT, max_nodes=0)),
    "unknown setting": (ConfigurationError, lambda ix: ix.set_config(capacity=1)),
    "setting of the wrong type": (ConfigurationError,
                                  lambda ix: ix.set_config(lease_ttl_ms="soon")),
    "setting out of range": (ConfigurationError, lambda ix: ix.set_config(high_watermark=2)),
    "extractor that is not registered": (
        ConfigurationError, lambda ix: ix.set_config(prefix_extractor="os:system")),
    "extractor change on a non-empty namespace": (
        ConfigurationError, lambda ix: ix.set_config(prefix_extractor="tagged")),
    "radix tree off on a non-empty namespace": (
        ConfigurationError, lambda ix: ix.set_config(enable_radix_tree=False)),
    "bad namespace": (ConfigurationError, lambda ix: Index(ix.client, namespace="a:{b}")),
    "unknown URL scheme": (ConfigurationError, lambda ix: Index.from_url("http://localhost")),
}


def other_writer(index: Index) -> Index:
    """Another client of the same namespace: its own writer token."""
    return Index(index.client, namespace=index.namespace)


def prepare(index: Index) -> None:
    index.put_start(DONE, 10)
    index.put_end(DONE)
    index.put_start(PROCESSING, 10, parent_block_hash=A)
    index.close()


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_is_refused_and_writes_nothing(index: Index, name: str) -> None:
    prepare(index)
    before = snapshot(index)
    error, call = BAD_INPUTS[name]
    with pytest.raises(error):
        call(index)
    assert snapshot(index) == before


def test_the_reliability_doc_lists_every_bad_input() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "RELIABILITY.md").read_text()
    rows = set(re.findall(r"^\| ([^|]+?) \| `\w+` \|", doc, flags=re.MULTILINE))
    assert set(BAD_INPUTS) <= rows, sorted(set(BAD_INPUTS) - rows)
    for name, (error, _) in BAD_INPUTS.items():
        assert f"| {name} | `{error.__name__}` |" in doc, name

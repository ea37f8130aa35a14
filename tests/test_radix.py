"""The radix tree index beside the store: registration paths, shells, queries, cleanup."""

from __future__ import annotations

import pytest
from helpers import assert_consistent, page, snapshot

from mooncake_redis import (
    CycleDetected,
    Index,
    InvalidArgument,
    ObjectNotFound,
    ParentConflict,
    RadixTreeDisabled,
)

A, B, C, D = page("A"), page("B"), page("C"), page("D")


def put(index: Index, prefix_hash: str, parent: str | None = None, rank: int = 0,
        complete: bool = True) -> str:
    key = f"{prefix_hash}_{rank}_k"
    index.put_start(key, 10, parent_block_hash=parent)
    if complete:
        index.put_end(key)
    return key


def test_path_a_registers_the_key_and_links_the_parent_across_shards(index: Index) -> None:
    assert A[:2] != B[:2]  # parent and child in different shards
    put(index, A)
    key = put(index, B, parent=A)
    node = index.get_node(B)
    assert node is not None and node.parent == A and node.keys == [key] and node.is_leaf
    parent = index.get_node(A)
    assert parent is not None and parent.children == [B] and not parent.is_leaf
    assert index.get_keys_by_prefix(B) == [key]
    assert_consistent(index)


def tree_without_timestamps(index: Index) -> dict:
    """The namespace with times left out (sorted sets keep their members, not scores)."""
    state = snapshot(index)
    for key, value in state.items():
        if isinstance(value, dict):
            value.pop("created_ms", None)
            value.pop("lease_ms", None)
        elif isinstance(value, list) and value and isinstance(value[0], tuple):
            state[key] = [member for member, _ in value]
    return state


@pytest.mark.parametrize("path", ["put_start", "register"])
def test_a_shell_is_filled_whichever_page_arrives_first(make_index, path: str) -> None:
    parent_first, child_first = make_index("one"), make_index("two")
    for index, order in ((parent_first, ["parent", "child"]), (child_first, ["child", "parent"])):
        for which in order:
            if which == "parent":
                put(index, A)
                if path == "register":
                    index.register_radix_tree_node(A, None, [f"{A}_0_k"])
            else:
                if path == "register":
                    put(index, B)
                    index.register_radix_tree_node(B, A, [f"{B}_0_k"])
                else:
                    put(index, B, parent=A)
            if which == "child" and order[0] == "child":
                shell = index.get_node(A)
                assert shell is not None and shell.is_shell and shell.children == [B]
        assert_consistent(index)
    one = {k.replace("one:", ""): v for k, v in tree_without_timestamps(parent_first).items()}
    two = {k.replace("two:", ""): v for k, v in tree_without_timestamps(child_first).items()}
    assert one == two
    node = child_first.get_node(A)
    assert node is not None and not node.is_shell and node.children == [B]


def test_path_b_registers_stored_objects_and_records_the_parent(index: Index) -> None:
    index.set_config(enable_radix_tree=False)
    key = f"{B}_0_k"
    index.put_start(key, 10)
    index.set_config(enable_radix_tree=True)
    assert index.get_node(B) is None
    index.register_radix_tree_node(B, A, [key])
    node = index.get_node(B)
    assert node is not None and node.parent == A and node.keys == [key]
    assert node.processing == 1 and node.eviction_score == float("inf")
    index.put_end(key)
    assert index.get_node(B).eviction_score < float("inf")  # type: ignore[union-attr]


def test_registration_refusals_write_nothing(index: Index) -> None:
    put(index, A)
    put(index, B, parent=A)
    put(index, C, parent=B)
    before = snapshot(index)
    refusals = [
        (ParentConflict, lambda: index.register_radix_tree_node(B, C)),
        (ParentConflict, lambda: index.put_start(f"{B}_1_k", 1, parent_block_hash=D)),
        (CycleDetected, lambda: index.register_radix_tree_node(A, C)),  # A -> B -> C -> A
        (CycleDetected, lambda: index.register_radix_tree_node(A, A)),
        (CycleDetected, lambda: index.put_start(f"{A}_1_k", 1, parent_block_hash=A)),
        (CycleDetected, lambda: index.put_start(f"{A}_1_k", 1, parent_block_hash=B)),
        (ObjectNotFound, lambda: index.register_radix_tree_node(D, A, [f"{D}_0_k"])),
        (InvalidArgument, lambda: index.register_radix_tree_node(D, A, [f"{A}_0_k"])),
        (InvalidArgument, lambda: index.register_radix_tree_node(D, A, [])),
        (InvalidArgument, lambda: index.register_radix_tree_node(D, A, f"{D}_0_k")),
        (InvalidArgument, lambda: index.register_radix_tree_node("", A)),
        (InvalidArgument, lambda: index.batch_register_radix_tree_node(
            [(D, A, [f"{D}_0_k"]), (D, B, [])])),
        (ParentConflict, lambda: index.batch_put_start([(f"{D}_0_k", 1, A), (f"{D}_1_k", 1, B)])),
        (InvalidArgument, lambda: index.batch_put_start([(f"{D}_0_k", 1, A), (5, 1, A)])),
    ]
    for error, call in refusals:
        with pytest.raises(error):
            call()
        assert snapshot(index) == before, error
    assert_consistent(index)


def test_a_cycle_inside_one_batch_is_refused(index: Index) -> None:
    put(index, A)
    put(index, B)
    before = snapshot(index)
    with pytest.raises(CycleDetected):
        index.batch_register_radix_tree_node([(A, B, [f"{A}_0_k"]), (B, A, [f"{B}_0_k"])])
    assert snapshot(index) == before


def test_match_prefix_counts_the_leading_run_of_complete_pages(index: Index) -> None:
    chain = [page(f"chain-{i}") for i in range(50)]
    parent = None
    for i, prefix_hash in enumerate(chain):
        put(index, prefix_hash, parent, complete=i != 30)
        parent = prefix_hash
    assert index.match_prefix(chain) == 30
    index.put_end(f"{chain[30]}_0_k")
    assert index.match_prefix(chain) == 50
    assert index.match_prefix(chain + [page("absent")] + chain) == 50
    assert index.match_prefix([]) == 0


def test_subtree_keys_by_depth(index: Index) -> None:
    keys = {h: put(index, h, p) for h, p in ((A, None), (B, A), (C, B), (D, A))}
    assert index.get_subtree_keys(A, max_depth=0) == [keys[A]]
    assert sorted(index.get_subtree_keys(A, max_depth=1)) == sorted([keys[A], keys[B], keys[D]])
    assert sorted(index.get_subtree_keys(A)) == sorted(keys.values())
    assert index.get_subtree_keys(C) == [keys[C]]
    with pytest.raises(InvalidArgument):
        index.get_subtree_keys(A, max_depth=-1)


def test_deleting_a_leaf_cascades_through_empty_ancestors(index: Index) -> None:
    chain = [page(f"deep-{i}") for i in range(20)]
    put(index, chain[0])
    for parent, child in zip(chain, chain[1:]):
        put(index, child, parent)
    # Interior pages lose their keys but stay, because they have children.
    for prefix_hash in chain[1:-1]:
        index.remove(f"{prefix_hash}_0_k")
    assert index.get_node(chain[5]) is not None and index.get_node(chain[5]).is_shell
    assert_consistent(index)
    index.remove(f"{chain[-1]}_0_k")
    assert all(index.get_node(h) is None for h in chain[1:])
    root = index.get_node(chain[0])
    assert root is not None and root.children == [] and root.is_leaf
    assert index.usage().nodes == 1
    assert_consistent(index)


def test_every_delete_path_leaves_the_tree_consistent(index: Index) -> None:
    def build() -> None:
        put(index, A)
        put(index, B, A)
        put(index, B, A, rank=1)
        put(index, C, B, complete=False)
        put(index, D, A)

    for delete in (
        lambda: index.put_revoke(f"{C}_0_k"),
        lambda: index.remove(f"{B}_0_k"),
        lambda: index.batch_remove([f"{B}_1_k", f"{D}_0_k", f"{A}_0_k"]),
        lambda: index.remove_by_regex(f"^{B}"),
        lambda: index.remove_all(),
        lambda: index.remove_all(force=True),
    ):
        build()
        delete()
        assert_consistent(index)
        index.remove_all(force=True)
        left = snapshot(index)
        assert left.pop(index.schema.usage) == "0" and left.pop(index.schema.config)
        assert all(key.endswith(":stats") and set(value.values()) == {"0"}
                   for key, value in left.items()), left


def test_a_node_with_keys_left_becomes_a_leaf_again(index: Index) -> None:
    put(index, A)
    put(index, B, A)
    leaves = index.schema.shard_keys(A[:2]).leaves
    assert index.client.zscore(leaves, A) is None
    index.remove(f"{B}_0_k")
    assert index.client.zscore(leaves, A) is not None


def test_tree_operations_are_refused_when_the_tree_is_disabled(make_index) -> None:
    index = make_index(enable_radix_tree=False)
    index.put_start(f"{B}_0_k", 1, parent_block_hash=A)
    assert index.get_node(B) is None and index.get_node(A) is None
    with pytest.raises(RadixTreeDisabled):
        index.get_keys_by_prefix(B)
    with pytest.raises(RadixTreeDisabled):
        index.register_radix_tree_node(B, A, [f"{B}_0_k"])

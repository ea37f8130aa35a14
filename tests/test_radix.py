"""The radix tree in the nodes: registration paths, shells, queries, cleanup."""

from __future__ import annotations

import pytest
from helpers import assert_consistent, node_fields, page, snapshot

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


def test_path_a_stores_the_object_and_links_the_parent_across_shards(index: Index) -> None:
    assert index.ctx.shard(A) != index.ctx.shard(B)  # parent and child in different shards
    put(index, A)
    key = put(index, B, parent=A)
    node = index.get_node(B)
    assert node is not None and node.parent == A and node.keys == [key] and node.is_leaf
    parent = index.get_node(A)
    assert parent is not None and parent.children == [B] and not parent.is_leaf
    assert node_fields(index, A)[B] == str(node.parent_epoch)  # the link's two ends agree
    assert index.get_keys_by_prefix(B) == [key]
    assert_consistent(index)


def test_a_confirmed_link_leaves_no_pending_entry(index: Index) -> None:
    put(index, A)
    put(index, B, parent=A)
    index.close()  # confirmations ride on the next batch; close sends them
    pending = index.ctx.schema.shard_keys(index.ctx.shard(A)).pending
    assert index.client.zcard(pending) == 0


def comparable(index: Index) -> dict:
    """The namespace without times, epochs and the namespace name."""
    state = {}
    for key, value in snapshot(index).items():
        key = key.split(":", 1)[1]
        if isinstance(value, dict):
            value = {f: ("~" if f in ("pe", "lm") or len(f) == 64 or f.startswith("o:") else v)
                     for f, v in value.items()}
        elif isinstance(value, list):
            value = [member for member, _ in value]
        state[key] = value
    return state


@pytest.mark.parametrize("path", ["put_start", "register"])
def test_a_shell_is_filled_whichever_page_arrives_first(make_index, path: str) -> None:
    parent_first, child_first = make_index("one"), make_index("two")
    for index, order in ((parent_first, ["parent", "child"]), (child_first, ["child", "parent"])):
        for which in order:
            if which == "parent":
                put(index, A)
            elif path == "register":
                put(index, B)
                index.register_radix_tree_node(B, A, [f"{B}_0_k"])
            else:
                put(index, B, parent=A)
            if which == "child" and order[0] == "child":
                shell = index.get_node(A)
                assert shell is not None and shell.is_shell and shell.children == [B]
        assert_consistent(index)
    assert comparable(parent_first) == comparable(child_first)
    node = child_first.get_node(A)
    assert node is not None and not node.is_shell and node.children == [B]


def test_path_b_links_stored_objects_and_checks_their_keys(index: Index) -> None:
    key = put(index, B, complete=False)
    index.register_radix_tree_node(B, A, [key])
    node = index.get_node(B)
    assert node is not None and node.parent == A and node.keys == [key]
    assert node.processing == 1
    shell = index.get_node(A)
    assert shell is not None and shell.is_shell and shell.children == [B]
    index.put_end(key)
    assert_consistent(index)


def test_registration_refusals_write_nothing(index: Index) -> None:
    put(index, A)
    put(index, B, parent=A)
    put(index, C, parent=B)
    index.close()
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
        (InvalidArgument, lambda: index.register_radix_tree_node(A.upper(), None)),
        (InvalidArgument, lambda: index.put_start(f"{D}_0_k", 1, parent_block_hash=A[:63])),
        (InvalidArgument, lambda: index.put_start("plain-key", 1, parent_block_hash=A)),
        (InvalidArgument, lambda: index.batch_register_radix_tree_node(
            [(D, A, [f"{D}_0_k"]), (D, B, [])])),
        (InvalidArgument, lambda: index.batch_put_start([(f"{D}_0_k", 1, A), (5, 1, A)])),
    ]
    for error, call in refusals:
        with pytest.raises(error):
            call()
        index.close()
        assert snapshot(index) == before, error
    assert_consistent(index)


def test_a_batch_refuses_items_one_by_one(index: Index) -> None:
    """Conflicting parents and cycles inside one batch refuse the item that breaks the
    rule; the other items are written."""
    put(index, A)
    put(index, B)
    results = index.batch_put_start([(f"{D}_0_k", 1, A), (f"{D}_1_k", 1, B), (f"{C}_0_k", 1, D)])
    assert [r.ok for r in results] == [True, False, True]
    assert isinstance(results[1].error, ParentConflict)
    results = index.batch_register_radix_tree_node([(A, B, [f"{A}_0_k"]), (B, A, [f"{B}_0_k"])])
    assert results[0].ok and isinstance(results[1].error, CycleDetected)
    assert index.get_node(A).parent == B and index.get_node(B).parent is None  # type: ignore[union-attr]
    assert_consistent(index)


def test_a_link_into_a_node_with_children_is_walked_for_cycles(index: Index) -> None:
    """C exists with a child (D) and no parent; linking C under B is safe only after a walk
    up from B finds no C; linking A under D would close A -> ... -> D -> ... -> A."""
    put(index, A)
    put(index, B, parent=A)
    put(index, D, parent=C)  # C is a shell with child D
    put(index, C, parent=B)  # walk up from B: B, A: no C
    assert index.get_node(C).parent == B  # type: ignore[union-attr]
    with pytest.raises(CycleDetected):
        index.register_radix_tree_node(A, D, [f"{A}_0_k"])
    assert_consistent(index)


def test_a_loop_above_the_parent_refuses_only_the_link_that_closes_it(index: Index) -> None:
    """A sits under B. One batch links B under A (closing B -> A -> B) and C, a node with a
    child, under A: the walk up from A for C runs A, B, then A again by the batch's own
    link, a loop that leaves C out. Only B's link is refused (found by hypothesis, seed
    1086802197 of test_model)."""
    put(index, A, parent=B)
    put(index, D, parent=C)  # C is a shell with child D: its link is walked
    results = index.batch_put_start([(f"{B}_0_k", 1, A), (f"{C}_0_k", 1, A)])
    assert isinstance(results[0].error, CycleDetected) and results[1].ok
    assert index.get_node(C).parent == A and index.get_node(B).parent is None  # type: ignore[union-attr]
    assert_consistent(index)


def test_a_batch_that_gives_a_new_node_a_child_with_descendants_walks_its_own_link(
        index: Index) -> None:
    """C is a shell with child D (no parent). One batch links C under A, a node it makes
    (so A's only child, C, comes from this batch and brings D along), then A under D:
    D -> C -> A -> D would close. The second link is refused. Found by hypothesis (seed
    3137763343 of test_model): the call walked only nodes with children from before the
    batch, and wrote the cycle."""
    put(index, D, parent=C)
    results = index.batch_put_start([(f"{C}_0_k", 1, A), (f"{A}_0_k", 1, D)])
    assert results[0].ok and isinstance(results[1].error, CycleDetected)
    assert index.get_node(C).parent == A and index.get_node(A).parent is None  # type: ignore[union-attr]
    assert_consistent(index)


def test_match_prefix_counts_the_leading_run_of_complete_pages(index: Index) -> None:
    chain = [page(f"chain-{i}") for i in range(50)]
    results = index.batch_put_start([(f"{h}_0_k", 10, p)
                                     for h, p in zip(chain, [None, *chain[:-1]])])
    assert all(r.ok for r in results)
    index.batch_put_end([f"{h}_0_k" for i, h in enumerate(chain) if i != 30])
    assert index.match_prefix(chain) == 30
    index.put_end(f"{chain[30]}_0_k")
    assert index.match_prefix(chain) == 50
    assert index.match_prefix(chain + [page("absent")] + chain) == 50
    assert index.match_prefix([]) == 0
    with pytest.raises(InvalidArgument):
        index.match_prefix(chain[0])  # a bare string is not a chain
    assert_consistent(index)


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
    # Interior pages lose their objects but stay, because they have children.
    index.batch_remove([f"{h}_0_k" for h in chain[1:-1]])
    assert index.get_node(chain[5]) is not None and index.get_node(chain[5]).is_shell  # type: ignore[union-attr]
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
        index.close()
        left = snapshot(index)
        assert list(left) == [index.ctx.schema.settings] or not left, left


def test_a_node_with_objects_left_becomes_a_leaf_again(index: Index) -> None:
    put(index, A)
    put(index, B, A)
    leaves = index.ctx.schema.shard_keys(index.ctx.shard(A)).leaves
    assert index.client.zscore(leaves, A) is None
    index.remove(f"{B}_0_k")
    assert index.client.zscore(leaves, A) is not None


def test_tree_operations_are_refused_when_the_tree_is_disabled(make_index) -> None:
    index = make_index(enable_radix_tree=False)
    index.put_start(f"{B}_0_k", 1, parent_block_hash=A)
    node = index.get_node(B)
    assert node is not None and node.parent is None and index.get_node(A) is None
    with pytest.raises(RadixTreeDisabled):
        index.get_keys_by_prefix(B)
    with pytest.raises(RadixTreeDisabled):
        index.register_radix_tree_node(B, A, [f"{B}_0_k"])


def test_a_batch_linking_into_a_node_with_earlier_children_still_walks(index: Index) -> None:
    """The batch marker spares a cycle walk only for a node whose children all came from
    this batch; D had a child (A) before, so linking D under A (closing D -> A -> D) while
    the same batch links C under D must be walked and refused."""
    put(index, D)
    put(index, A, parent=D)
    results = index.batch_put_start([(f"{C}_0_k", 1, D), (f"{D}_1_k", 1, A)])
    assert results[0].ok and isinstance(results[1].error, CycleDetected)
    assert_consistent(index)

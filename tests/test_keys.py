"""Golden test: the key schema is a contract redis-cli users read; it changes only on purpose."""

from __future__ import annotations

import pytest

from mooncake_redis import ConfigurationError
from mooncake_redis.keys import KeySchema

H = "13" + "ab" * 31


def test_key_schema_is_pinned() -> None:
    schema = KeySchema("mc")
    node = schema.node_keys(H)
    shard = schema.shard_keys("13")
    assert schema.object_key(f"{H}_0_k", H) == f"mc:{{13}}:obj:{H}_0_k"
    assert node.node == f"mc:{{13}}:node:{H}"
    assert node.children == f"mc:{{13}}:children:{H}"
    assert node.keys == f"mc:{{13}}:keys:{H}"
    assert shard.leaves == "mc:{13}:leaves"
    assert shard.objects == "mc:{13}:objects"
    assert shard.stats == "mc:{13}:stats"
    assert shard.soft_leaves == "mc:{13}:soft_leaves"
    assert shard.nodes == "mc:{13}:nodes"
    assert schema.config == "mc:config"
    assert schema.usage == "mc:usage"
    assert schema.pattern() == "mc:*"


def test_an_object_lives_in_the_shard_of_its_prefix_not_its_own_key() -> None:
    schema = KeySchema("ns")
    assert schema.object_key("zz-any-key", H).startswith("ns:{13}:obj:")


@pytest.mark.parametrize("namespace", ["", "a:b", "a{b}", "x" * 65, 5])
def test_bad_namespaces_are_refused(namespace: object) -> None:
    with pytest.raises(ConfigurationError):
        KeySchema(namespace)  # type: ignore[arg-type]

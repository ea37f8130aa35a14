"""Configuration: validated once, kept in Redis for every client, overridable from the
environment."""

from __future__ import annotations

import pytest

from mooncake_redis import Config, ConfigurationError, Index
from mooncake_redis.config import env_overrides


def test_the_first_client_writes_the_config_and_later_clients_read_it(make_index) -> None:
    first: Index = make_index(capacity_bytes=1000, high_watermark=0.8)
    second: Index = make_index()
    assert second.config.capacity_bytes == 1000 and second.config.high_watermark == 0.8
    stored = first.client.hgetall(first.schema.config)
    assert stored["capacity_bytes"] == "1000" and stored["enable_radix_tree"] == "1"


def test_a_change_reaches_other_clients_after_the_refresh_interval(make_index) -> None:
    first: Index = make_index(config_refresh_seconds=0)
    second: Index = make_index()
    first.set_config(capacity_bytes=5)
    assert second.config.capacity_bytes == 5


def test_the_environment_overrides_with_one_prefix(make_index, monkeypatch) -> None:
    monkeypatch.setenv("MOONCAKE_REDIS_LEASE_TTL_MS", "250")
    monkeypatch.setenv("MOONCAKE_REDIS_ENABLE_RADIX_TREE", "false")
    index: Index = make_index()
    assert index.config.lease_ttl_ms == 250 and index.config.enable_radix_tree is False


def test_an_unknown_environment_option_is_named(monkeypatch) -> None:
    monkeypatch.setenv("MOONCAKE_REDIS_CAPACITY", "1")
    with pytest.raises(ConfigurationError, match="MOONCAKE_REDIS_CAPACITY is not an option"):
        env_overrides()


@pytest.mark.parametrize(
    "options",
    [
        {"capacity_bytes": -1},
        {"high_watermark": 1.5},
        {"high_watermark": 0.5, "eviction_ratio": 0.6},
        {"lease_ttl_ms": "soon"},
        {"enable_radix_tree": "maybe"},
        {"max_rounds_per_job": 0},
        {"prefix_extractor": "nope"},
        {"no_such_option": 1},
    ],
)
def test_invalid_options_are_refused_and_nothing_is_stored(make_index, options) -> None:
    with pytest.raises(ConfigurationError):
        make_index(namespace="bad", **options)
    good: Index = make_index(namespace="good")
    assert good.client.exists("bad:config") == 0


def test_round_trip_through_redis_strings() -> None:
    config = Config(capacity_bytes=7, high_watermark=0.75, enable_radix_tree=False)
    assert Config.from_redis(config.to_redis()) == config


def test_unknown_url_schemes_are_configuration_errors() -> None:
    for url in ("http://localhost", "nonsense"):
        with pytest.raises(ConfigurationError):
            Index.from_url(url)


def test_error_messages_never_show_the_password() -> None:
    with pytest.raises(ConfigurationError) as refused:
        Index.from_url("ftp://user:hunter2@localhost:1")
    assert "hunter2" not in str(refused.value)

"""Namespace settings (v2): stored in `<ns>:settings` and changed only by set_config;
opening an index fills in settings not stored yet (arguments over MOONCAKE_REDIS_<NAME>
variables) and never rewrites a stored one; every value is checked against its type and
range; client options stay in the process."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import fields

import pytest
from helpers import page

from mooncake_redis import ClientOptions, ConfigurationError, Index, Settings
from mooncake_redis.settings import coerce, encode, settings_from

KEY = f"{page('s')}_0_k"
NUMERIC = [f.name for f in (*fields(Settings), *fields(ClientOptions))
           if str(f.type) in ("int", "float")]


def stored(index: Index) -> dict[str, str]:
    """The stored settings besides the layout: shard_count is recorded by a namespace's
    first writable client whatever it was given (tests/test_shard_count.py)."""
    values = index.client.hgetall(index.ctx.schema.settings)
    values.pop("shard_count", None)
    return values


@pytest.fixture(autouse=True)
def no_settings_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees only the MOONCAKE_REDIS_* variables it sets."""
    for name in list(os.environ):
        if name.startswith("MOONCAKE_REDIS_"):
            monkeypatch.delenv(name)


def test_the_first_client_stores_what_it_was_given_and_later_clients_read_it(
        make_index) -> None:
    first: Index = make_index(capacity_bytes=1000, high_watermark=0.8)
    second: Index = make_index()
    assert second.settings.capacity_bytes == 1000 and second.settings.high_watermark == 0.8
    assert stored(first) == {"capacity_bytes": "1000", "high_watermark": "0.8"}  # no defaults


def test_opening_never_rewrites_a_stored_setting(make_index, caplog) -> None:
    make_index(lease_ttl_ms=1000)
    with caplog.at_level(logging.WARNING, logger="mooncake_redis"):
        second: Index = make_index(lease_ttl_ms=5000, capacity_bytes="1KiB")
    assert second.settings.lease_ttl_ms == 1000  # the stored one wins
    assert stored(second) == {"lease_ttl_ms": "1000", "capacity_bytes": "1024"}  # gap filled
    (warning,) = [r.getMessage() for r in caplog.records if "lease_ttl_ms" in r.getMessage()]
    assert "has lease_ttl_ms=1000; ignoring 5000" in warning and "set_config" in warning


def test_strict_raises_on_a_difference_and_writes_nothing(make_index) -> None:
    make_index(lease_ttl_ms=1000)
    with pytest.raises(ConfigurationError, match="lease_ttl_ms=1000; ignoring 5000"):
        make_index(strict=True, lease_ttl_ms=5000, capacity_bytes=7)
    assert stored(make_index()) == {"lease_ttl_ms": "1000"}
    make_index(strict=True, lease_ttl_ms=1000)  # the same value is no difference


def test_read_only_fills_in_nothing_and_reads_what_every_client_reads(make_index) -> None:
    index: Index = make_index(read_only=True, capacity_bytes=5, high_watermark=0.5)
    assert stored(index) == {}
    assert index.settings == Settings()  # not stored: the defaults, as for any other client


def test_the_environment_fills_only_settings_not_stored(make_index, monkeypatch) -> None:
    monkeypatch.setenv("MOONCAKE_REDIS_LEASE_TTL_MS", "250")
    monkeypatch.setenv("MOONCAKE_REDIS_ENABLE_RADIX_TREE", "false")
    monkeypatch.setenv("MOONCAKE_REDIS_CAPACITY_BYTES", "64GiB")
    first: Index = make_index(namespace="env", lease_ttl_ms=300)  # an argument beats the env
    assert stored(first) == {"lease_ttl_ms": "300", "enable_radix_tree": "0",
                             "capacity_bytes": str(64 << 30)}
    monkeypatch.setenv("MOONCAKE_REDIS_LEASE_TTL_MS", "999")
    second: Index = make_index(namespace="env")
    assert second.settings.lease_ttl_ms == 300 and stored(second)["lease_ttl_ms"] == "300"


def test_unknown_mooncake_variables_are_ignored(make_index, monkeypatch, caplog) -> None:
    monkeypatch.setenv("MOONCAKE_REDIS_PORT", "6379")  # an orchestrator's, say
    monkeypatch.setenv("MOONCAKE_REDIS_CAPACITY", "1")  # a typo: ignored too, logged
    with caplog.at_level(logging.DEBUG, logger="mooncake_redis"):
        index: Index = make_index()
    assert stored(index) == {} and index.settings.capacity_bytes == 0
    assert any("ignoring MOONCAKE_REDIS_CAPACITY" in r.getMessage() for r in caplog.records)


def test_a_bad_value_in_a_known_variable_is_refused(make_index, monkeypatch) -> None:
    monkeypatch.setenv("MOONCAKE_REDIS_LEASE_TTL_MS", "soon")
    with pytest.raises(ConfigurationError, match="lease_ttl_ms"):
        make_index()


def test_url_and_namespace_come_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("MOONCAKE_REDIS_URL", "memory://settings-env")
    monkeypatch.setenv("MOONCAKE_REDIS_NAMESPACE", "from-env")
    index = Index.from_url()
    assert index.namespace == "from-env" and index.url == "memory://settings-env"
    index.put_start(KEY, 1)
    assert Index.from_url("memory://settings-env", namespace="from-env").object_info(KEY)
    assert Index.from_url(namespace="explicit").namespace == "explicit"  # an argument wins


def test_client_options_stay_in_the_process(make_index, monkeypatch) -> None:
    monkeypatch.setenv("MOONCAKE_REDIS_WAIT_TIMEOUT_MS", "250")
    index: Index = make_index(queue_url="redis://u:pw@queue-host:6379/1", cluster_retries=3,
                              settings_refresh_seconds=0)
    assert (index.ctx.options.queue_url, index.ctx.options.cluster_retries,
            index.ctx.options.wait_timeout_ms) == ("redis://u:pw@queue-host:6379/1", 3, 250)
    assert stored(index) == {}


def test_the_old_name_wait_replicas_still_sets_wait_acks_with_a_warning(make_index) -> None:
    with pytest.warns(DeprecationWarning, match="wait_replicas is now wait_acks"):
        index: Index = make_index(wait_replicas=2)
    assert index.ctx.options.wait_acks == 2
    assert stored(index) == {}


def test_the_old_variable_wait_replicas_still_sets_wait_acks(make_index, monkeypatch) -> None:
    monkeypatch.setenv("MOONCAKE_REDIS_WAIT_REPLICAS", "3")
    with pytest.warns(DeprecationWarning, match="wait_replicas is now wait_acks"):
        index: Index = make_index()
    assert index.ctx.options.wait_acks == 3


def test_the_old_and_the_new_name_together_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="give only wait_acks"):
        Index.from_url("memory://settings-alias", wait_replicas=1, wait_acks=1)


def test_a_change_reaches_other_clients_when_they_re_read(make_index) -> None:
    first: Index = make_index(capacity_bytes=10)
    eager: Index = make_index(settings_refresh_seconds=0)
    lazy: Index = make_index(settings_refresh_seconds=3600)
    first.set_config(capacity_bytes=5, lease_ttl_ms=20)
    assert (eager.settings.capacity_bytes, eager.settings.lease_ttl_ms) == (5, 20)
    assert lazy.settings.capacity_bytes == 10  # until its next re-read
    assert lazy.ctx.reload_settings().capacity_bytes == 5


def test_set_config_validates_and_stores_only_the_change(make_index) -> None:
    index: Index = make_index(capacity_bytes=10)
    for bad in ({"no_such_setting": 1}, {"high_watermark": 2}, {"lease_ttl_ms": "soon"},
                {"eviction_ratio": 0.95}):
        with pytest.raises(ConfigurationError):
            index.set_config(**bad)
    assert stored(index) == {"capacity_bytes": "10"}
    index.set_config(capacity_bytes="2KiB")
    assert stored(index) == {"capacity_bytes": "2048"}


def test_set_config_refuses_a_client_option() -> None:
    index = Index.from_url("memory://settings-option")
    with pytest.raises(ConfigurationError, match="client option"):
        index.set_config(cluster_retries=1)
    assert stored(index) == {}


@pytest.mark.parametrize("name", NUMERIC)
def test_every_numeric_setting_has_a_range(name: str) -> None:
    for value in (-1, 1 << 70, float("nan"), float("inf")):
        with pytest.raises(ConfigurationError):
            coerce(name, value)
    default = getattr(Settings(), name, None)
    if default is None:
        default = getattr(ClientOptions(), name)
    assert coerce(name, default) == default


@pytest.mark.parametrize("name, lowest, below", [
    ("capacity_bytes", 0, -1), ("high_watermark", 0.01, 0.0), ("eviction_ratio", 0.0, -0.01),
    ("lease_ttl_ms", 0, -1), ("put_start_release_timeout_ms", 1, 0),
    ("eviction_lock_ttl_ms", 1000, 999), ("max_rounds_per_job", 1, 0),
    ("leaves_per_round", 1, 0), ("max_depth", 16, 15), ("max_key_length", 64, 63),
    ("link_epoch_horizon_ms", 1000, 999), ("wait_timeout_ms", 1, 0),
])
def test_the_lowest_value_of_a_range_is_accepted_and_below_it_refused(
        name: str, lowest: float, below: float) -> None:
    assert coerce(name, lowest) == lowest
    with pytest.raises(ConfigurationError, match="outside"):
        coerce(name, below)


@pytest.mark.parametrize("text, size", [
    ("64GiB", 64 << 30), ("512MB", 512_000_000), ("1.5KiB", 1536), ("10 kb", 10_000),
    ("100", 100), (" 2 TiB ", 2 << 40), ("1b", 1), ("0", 0),
])
def test_sizes_may_be_human(text: str, size: int) -> None:
    assert coerce("capacity_bytes", text) == size
    if size:
        assert coerce("max_object_size", text) == size


@pytest.mark.parametrize("name, text", [
    ("capacity_bytes", "1.5"), ("capacity_bytes", "64XB"), ("capacity_bytes", "-1GiB"),
    ("capacity_bytes", "GiB"), ("capacity_bytes", "1e9"), ("lease_ttl_ms", "10k"),
    ("enable_radix_tree", "maybe"), ("high_watermark", "high"), ("prefix_extractor", 7),
])
def test_malformed_values_are_refused(name: str, text: object) -> None:
    with pytest.raises(ConfigurationError, match=name):
        coerce(name, text)


@pytest.mark.parametrize(
    "settings",
    [
        {"capacity_bytes": -1},
        {"high_watermark": 1.5},
        {"high_watermark": 0.5, "eviction_ratio": 0.6},
        {"lease_ttl_ms": "soon"},
        {"enable_radix_tree": "maybe"},
        {"max_rounds_per_job": 0},
        {"prefix_extractor": "nope"},
        {"prefix_extractor": "os:system"},
        {"no_such_setting": 1},
        {"capacity_bytes": 10, "wait_acks": -1},
    ],
)
def test_invalid_settings_are_refused_and_nothing_is_stored(make_index, settings) -> None:
    with pytest.raises(ConfigurationError):
        make_index(namespace="bad", **settings)
    assert make_index(namespace="good").client.exists("bad:settings") == 0


BAD_STORED = {
    "an extractor nobody registered": {"prefix_extractor": "nope"},
    "an extractor as an import path": {"prefix_extractor": "os:system"},
    "a capacity past any float": {"capacity_bytes": "1e999"},
    "a watermark that is not a number": {"high_watermark": "nan"},
    "a watermark out of range": {"high_watermark": "7"},
    "a pair that breaks the watermark rule": {"high_watermark": "0.5", "eviction_ratio": "0.6"},
    "a flag that is no flag": {"enable_radix_tree": "maybe"},
    "a timeout in words": {"put_start_release_timeout_ms": "soon"},
}


@pytest.mark.parametrize("backend, case", [
    *(("redis", case) for case in sorted(BAD_STORED)),
    *((backend, case) for backend in ("cluster", "fakeredis")
      for case in ("an extractor nobody registered", "a pair that breaks the watermark rule"))])
def test_a_bad_stored_setting_shuts_nobody_out(make_index, backend, case, caplog,
                                               capsys) -> None:
    """Clients, the eviction job, the monitor, fsck and the CLI open the namespace with the
    default for each unreadable value, say so, and `config set` / `config reset` mend it."""
    from mooncake_redis.cli.main import main
    from mooncake_redis.operations.fsck import check
    from mooncake_redis.workers.monitor import watch

    first: Index = make_index(capacity_bytes="1MiB")
    first.put_start(KEY, 10)
    first.put_end(KEY)
    bad = BAD_STORED[case]
    first.client.hset(first.ctx.schema.settings, mapping=bad)
    with caplog.at_level(logging.ERROR, logger="mooncake_redis"):
        index: Index = make_index()
    assert all(getattr(index.settings, name) == getattr(Settings(), name) for name in bad)
    assert index.ctx.unreadable_settings == bad
    assert any("cannot be read" in r.getMessage() for r in caplog.records)
    with pytest.raises(ConfigurationError, match="cannot be read"):
        make_index(strict=True)
    assert index.get(KEY) is not None and index.usage().objects == 1
    index.put_start(f"{page('after-bad')}_0_k", 1, parent_block_hash=page("s"))
    assert index.evict(target_ratio=0).stopped in ("target reached", "nothing evictable")
    assert watch(index.ctx, interval_s=0, iterations=1) == 0  # no queue: nothing enqueued
    found = check(index.ctx, repair=True)
    assert set(found.counts) == {"setting_unreadable"}, found.problems
    cli = ["--url", index.url, "--namespace", index.namespace]
    capsys.readouterr()
    assert main([*cli, "stats"]) == 0
    assert "UNREADABLE stored value" in capsys.readouterr().out
    assert main([*cli, "config", "get", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["unreadable_stored_settings"] == bad
    names = sorted(bad)
    assert main([*cli, "config", "set", f"{names[0]}={encode(getattr(Settings(), names[0]))}"]) \
        == 0
    assert main([*cli, "config", "reset", *names[1:]]) == 0 if names[1:] else True
    capsys.readouterr()
    assert make_index().ctx.unreadable_settings == {}
    assert check(index.ctx).clean


def test_a_running_client_keeps_the_value_it_read_before(make_index, caplog) -> None:
    running: Index = make_index(capacity_bytes=10, high_watermark=0.8,
                                settings_refresh_seconds=0)
    running.client.hset(running.ctx.schema.settings, "high_watermark", "7")
    with caplog.at_level(logging.ERROR, logger="mooncake_redis"):
        assert running.settings.capacity_bytes == 10 and running.settings.high_watermark == 0.8
        running.settings  # noqa: B018  # re-read: said once, not at every re-read
    assert sum("cannot be read" in r.getMessage() for r in caplog.records) == 1
    assert make_index().settings.high_watermark == 0.9  # a new client: the default


def test_config_reset_follows_the_rules_of_config_set(make_index) -> None:
    index: Index = make_index(prefix_extractor="tagged", lease_ttl_ms=5)
    index.put_start(KEY, 1)
    with pytest.raises(ConfigurationError, match="refusing to change prefix_extractor"):
        index.reset_config("prefix_extractor")
    assert index.reset_config("lease_ttl_ms").lease_ttl_ms == Settings().lease_ttl_ms
    assert stored(index) == {"prefix_extractor": "tagged"}
    with pytest.raises(ConfigurationError, match="unknown setting"):
        index.reset_config("no_such_setting")
    with pytest.raises(ConfigurationError, match="client option"):
        index.reset_config("queue_url")


def test_stored_names_this_version_does_not_know_are_ignored(make_index) -> None:
    index: Index = make_index()
    index.client.hset(index.ctx.schema.settings, "from_a_newer_version", "whatever")
    assert make_index().settings == Settings()


def test_the_extractor_is_stored_by_name(make_index) -> None:
    index: Index = make_index(prefix_extractor="tagged")
    assert stored(index) == {"prefix_extractor": "tagged"}
    assert make_index().ctx.extractor.name == "tagged"


@pytest.mark.parametrize("change", [{"prefix_extractor": "tagged"},
                                    {"enable_radix_tree": False}])
def test_changes_that_would_strand_data_are_refused_on_a_namespace_with_nodes(
        make_index, change) -> None:
    index: Index = make_index()
    index.put_start(KEY, 1)
    with pytest.raises(ConfigurationError, match="refusing to change"):
        index.set_config(**change)
    assert stored(index) == {}
    index.remove_all(force=True)
    assert index.usage().nodes == 0
    index.set_config(**change)  # an empty namespace may change its rule
    assert index.settings == settings_from(change)


def test_turning_the_tree_back_on_is_allowed_on_a_namespace_with_nodes(make_index) -> None:
    index: Index = make_index(enable_radix_tree=False)
    index.put_start(KEY, 1)
    index.set_config(enable_radix_tree=True)
    assert index.settings.enable_radix_tree and stored(index)["enable_radix_tree"] == "1"


def test_round_trip_through_redis_strings() -> None:
    settings = Settings(capacity_bytes=7, high_watermark=0.75, enable_radix_tree=False,
                        prefix_extractor="tagged")
    assert settings_from(settings.to_redis()) == settings


def test_unknown_url_schemes_are_configuration_errors() -> None:
    for url in ("http://localhost", "nonsense", "ftp://user:hunter2@localhost:1"):
        with pytest.raises(ConfigurationError) as refused:
            Index.from_url(url)
        assert "hunter2" not in str(refused.value)


def test_an_unknown_argument_names_the_known_settings() -> None:
    with pytest.raises(ConfigurationError, match="unknown setting 'capacity'.*capacity_bytes"):
        Index.from_url("memory://settings-unknown", capacity=1)


def test_an_unreadable_structural_setting_can_be_set_back_on_a_namespace_with_nodes(
        make_index) -> None:
    index: Index = make_index(prefix_extractor="tagged")
    index.put_start(f"llama3:{page('t')}_0_k", 1)
    index.client.hset(index.ctx.schema.settings, "prefix_extractor", "nope")  # planted
    mending: Index = make_index()
    assert mending.ctx.unreadable_settings == {"prefix_extractor": "nope"}
    with pytest.raises(ConfigurationError, match="refusing to reset prefix_extractor"):
        mending.reset_config("prefix_extractor")  # the default may not be its rule
    mending.set_config(prefix_extractor="tagged")  # the namespace's real rule: not a change
    assert stored(mending)["prefix_extractor"] == "tagged"
    with pytest.raises(ConfigurationError, match="refusing to change prefix_extractor"):
        mending.set_config(prefix_extractor="rfc")  # readable again: changes are refused

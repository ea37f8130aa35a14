"""doctor warns about Redis settings that lose index state, on real servers."""

from __future__ import annotations

import redis
from redis_server import RedisServer

from mooncake_redis.cli import main
from mooncake_redis.doctor import diagnose


def test_a_redis_that_persists_nothing_or_evicts_gets_warnings(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)  # the tests' server: no AOF
    client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        warnings = diagnose(client)
        assert any("persists nothing" in w for w in warnings)
        assert any("allkeys-lru" in w for w in warnings)
        assert main(["--url", redis_url, "doctor"]) == 1
    finally:
        client.config_set("maxmemory-policy", "noeviction")


def test_a_persistent_noeviction_redis_is_fine(capsys) -> None:
    server = RedisServer("--appendonly", "yes")
    try:
        assert diagnose(redis.Redis(port=server.port, decode_responses=True)) == []
        assert main(["--url", server.url, "doctor"]) == 0
        assert capsys.readouterr().out.startswith("ok")
    finally:
        server.stop()

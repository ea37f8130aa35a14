"""docker-compose.yml and the Redis config, validated without a Docker engine: the file
parses, every service runs a real command of ours with real options, and the Redis
config loads in a real redis-server with AOF on and no eviction of its own."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import redis
import yaml
from redis_server import RedisServer

from mooncake_redis.cli.main import build_parser
from mooncake_redis.settings import (
    ENV_NAMESPACE,
    ENV_PREFIX,
    ENV_URL,
    OPTION_NAMES,
    SETTING_NAMES,
    from_environment,
)

ROOT = Path(__file__).resolve().parents[1]


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_has_redis_a_worker_and_a_monitor() -> None:
    services = compose()["services"]
    assert {"redis", "worker", "monitor"} <= set(services)
    redis_service = services["redis"]
    assert redis_service["command"][-1] == "/usr/local/etc/redis/redis.conf"
    assert any(v.startswith("./deploy/redis.conf:") for v in redis_service["volumes"])
    assert (ROOT / "deploy" / "redis.conf").is_file()


def published(port: str) -> tuple[str, str, str]:
    """(host address, host port, container port) of a compose port, `${VAR:-default}`
    read as compose reads it when VAR is unset."""
    resolved = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", port)
    address, host_port, container_port = resolved.rsplit(":", 2)
    return address, host_port, container_port


def test_every_port_is_published_on_localhost_only_by_default() -> None:
    """Redis has no password in compose: a port on 0.0.0.0 would let anyone who reaches the
    machine write the index."""
    ports = [(name, port) for name, service in compose()["services"].items()
             for port in service.get("ports", [])]
    assert ports and all(published(port)[0] == "127.0.0.1" for _, port in ports), ports
    assert "MOONCAKE_REDIS_BIND" in (ROOT / "docs" / "OPERATIONS.md").read_text()


def test_metrics_listen_on_this_machine_only_by_default() -> None:
    """The exporters are served on loopback unless told otherwise, as compose publishes
    its ports; an address on every interface is a choice made on the command line."""
    parser = build_parser()
    for command, option in ((["metrics"], "address"),
                            (["worker", "--metrics-port", "1"], "metrics_address"),
                            (["monitor", "--metrics-port", "1"], "metrics_address")):
        assert getattr(parser.parse_args(command), option) == "127.0.0.1", command


def test_worker_and_monitor_run_real_commands_with_real_options() -> None:
    services = compose()["services"]
    parser = build_parser()
    for name in ("worker", "monitor"):
        service = services[name]
        args = parser.parse_args(service["command"])  # SystemExit here = unknown command
        assert args.command == name
        assert [published(port)[1:] for port in service["ports"]] == \
            [(str(args.metrics_port), str(args.metrics_port))]
        # inside its container: on every interface, or the published port reaches nothing
        # (the host publishes it on 127.0.0.1 only: test above)
        assert args.metrics_address == "0.0.0.0"
        environment = {k: str(v) for k, v in service["environment"].items()}
        from_environment(environment)  # raises on a value out of its range
        # from_environment ignores unknown MOONCAKE_REDIS_* names: a typo must fail here
        names = {k[len(ENV_PREFIX):].lower() for k in environment
                 if k.startswith(ENV_PREFIX) and k not in (ENV_URL, ENV_NAMESPACE)}
        assert names <= set(SETTING_NAMES) | set(OPTION_NAMES), names
        assert "queue_url" in names  # the worker and monitor need the RQ queue
        assert environment[ENV_URL].startswith("redis://redis:6379/")
        assert service["build"] == "."
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"


def test_the_dockerfile_installs_the_package_with_its_lua_and_workers() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    copied = {source for line in lines if line.startswith("COPY ")
              for source in shlex.split(line)[1:-1]}
    # pyproject.toml names README.md and LICENSE: the build fails without them.
    # lua/ and workers/ are mapped into the package (pyproject.toml's package-dir)
    assert {"pyproject.toml", "README.md", "LICENSE", "mooncake_redis", "lua",
            "workers"} <= copied
    # the metrics extra (rq is a dependency): compose starts the worker and the monitor
    # with --metrics-port
    assert any(line.startswith("RUN pip install") and line.endswith(' ".[metrics]"')
               for line in lines)
    assert "ENV PYTHONUNBUFFERED=1" in lines  # log lines reach `docker logs` at once
    assert 'ENTRYPOINT ["mooncake-redis"]' in lines


def test_our_redis_config_loads_with_aof_and_noeviction(tmp_path: Path) -> None:
    conf = (ROOT / "deploy" / "redis.conf").read_text().replace("dir /data", f"dir {tmp_path}")
    (tmp_path / "redis.conf").write_text(conf)
    server = RedisServer(directory=tmp_path, config_file=tmp_path / "redis.conf")
    try:
        client = redis.Redis(port=server.port, decode_responses=True)
        settings = client.config_get("*")
        assert settings["appendonly"] == "yes"
        assert settings["maxmemory-policy"] == "noeviction"
        assert settings["zset-max-listpack-value"] == "128"
    finally:
        server.stop()

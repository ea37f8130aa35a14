"""What tests/vllm_kv_events.py (vLLM's kv_events.py, vendored) imports from the rest of
vLLM, reduced to what its event classes and ZmqEventPublisher use. ExternalBlockHash is
copied from vllm/v1/core/kv_cache_utils.py and KVEventsConfig's fields from
vllm/config/kv_events.py (vllm 0.33.0); the network helpers serve only `tcp://*:0`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TypeAlias

ExternalBlockHash: TypeAlias = bytes | int


@dataclass
class KVEventsConfig:
    enable_kv_cache_events: bool = False
    publisher: str | None = None
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000
    topic: str = ""


def init_logger(name: str) -> logging.Logger:
    return logging.getLogger(name)


def get_ip() -> str:
    return "127.0.0.1"


def get_tcp_uri(ip: str, port: int) -> str:
    return f"tcp://{ip}:{port}"


def is_valid_ipv6_address(address: str) -> bool:
    return ":" in address


def split_zmq_path(path: str) -> tuple[str, str, str]:
    scheme, _, rest = path.partition("://")
    host, _, port = rest.rpartition(":")
    return scheme, host, port

"""What `MooncakeDistributedStore.setup` takes, checked as Mooncake checks it, and where
the drop-in finds its Redis, namespace and data directory.

Sizes in the config-dict form are strings parsed as Mooncake 0.3.13 parses them
(`try_string_to_byte_size` in mooncake-store/include/utils.h): a number as `std::stod`
reads it (decimal, exponent or hexadecimal), then an optional unit B, K/KB, M/MB, G/GB,
T/TB in any case, powers of 1024; "MiB" and other units are refused, as are negative
numbers; "infinite" is the largest size (which no range admits). Every value of the
dict is first turned into text with str(), as Mooncake's binding does with py::str.
"""

from __future__ import annotations

import math
import os
import random
import re
import socket
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..connection import SUPPORTED_SCHEMES
from ..errors import SetupError
from ..settings import DEFAULT_NAMESPACE, ENV_NAMESPACE, ENV_PREFIX, ENV_URL
from ..urls import redact

ENV_DATA_DIR = ENV_PREFIX + "DATA_DIR"
"""The directory under which every store of a namespace keeps its segment's files."""

MIN_SEGMENT_SIZE = 16 << 20
"""Mooncake 0.3.13's allocator refuses a smaller global segment (0 = mount none)."""
MIN_BUFFER_SIZE = 1024
MAX_BUFFER_SIZE = 1 << 40
"""local_buffer_size: 0, or 1 KiB to 1 TiB (Mooncake's MIN/MAX_SEGMENT_SIZE, types.h)."""

DEFAULT_SEGMENT_SIZE = DEFAULT_BUFFER_SIZE = 16 << 20
DEFAULT_PROTOCOL = "tcp"
DEFAULT_MASTER = "127.0.0.1:50051"
DEFAULT_TENANT = "default"
PROTOCOLS = frozenset({"tcp", "rdma", "efa", "cxl", "nvlink", "hip", "ascend", "barex"})
"""Transports a Mooncake build may have; the drop-in moves bytes through files whatever
the protocol, and answers INTERNAL_ERROR for any other name, as Mooncake does."""

CLIENT_PORTS = (12300, 14300)
"""Where a store's segment port is drawn from (`<local_hostname>:<port>`), as Mooncake's
real client draws its own: uniformly in [12300, 14300], or the range
MC_STORE_CLIENT_MIN_PORT / MC_STORE_CLIENT_MAX_PORT give when Mooncake would take it
(both ports 1024-65535, outside Linux's ephemeral 32768-60999, min <= max)."""
PORT_ATTEMPTS = 400
"""Ports tried before setup gives up (Mooncake: 20 binders of 20 tries each)."""

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "G": 1 << 30, "GB": 1 << 30, "T": 1 << 40, "TB": 1 << 40}
_HEX = re.compile(r"\s*([+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)"
                  r"(?:[pP][+-]?\d+)?)")
_DECIMAL = re.compile(r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)")


def parse_size(text: str) -> int | None:
    """Bytes, as Mooncake reads a size string; None if it refuses it. Unlike Mooncake,
    "inf" and numbers of 2**64 bytes or more are refused (Mooncake converts them to an
    integer in a way C++ leaves undefined)."""
    stripped = text.strip(" \t\r\n")
    if not stripped:
        return None
    if stripped == "infinite":
        return (1 << 64) - 1
    match = _HEX.match(stripped) or _DECIMAL.match(stripped)
    if match is None:
        return None
    number = match.group(1)
    value = float.fromhex(number) if "x" in number.lower() else float(number)
    unit = stripped[match.end():].lstrip(" \t\r\n").upper()
    if value < 0 or unit not in _UNITS:
        return None
    size = value * _UNITS[unit]
    if not math.isfinite(size) or size >= 2.0 ** 64:
        return None
    return int(size)


@dataclass(frozen=True)
class SetupOptions:
    """One setup() call's arguments, checked."""

    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    master_server_addr: str
    tenant_id: str = DEFAULT_TENANT
    namespace: str | None = None
    """The config dict's "namespace" (else MOONCAKE_REDIS_NAMESPACE, else "mc")."""
    data_dir: str | None = None
    """The config dict's "data_dir" (else MOONCAKE_REDIS_DATA_DIR, else a temp dir)."""

    @classmethod
    def positional(cls, local_hostname: Any, metadata_server: Any, global_segment_size: Any,
                   local_buffer_size: Any, protocol: Any, rdma_devices: Any,
                   master_server_addr: Any, tenant_id: Any = DEFAULT_TENANT) -> SetupOptions:
        """The positional form; arguments of the wrong type raise TypeError, as Mooncake's
        binding does."""
        for name, value in (("local_hostname", local_hostname),
                            ("metadata_server", metadata_server), ("protocol", protocol),
                            ("rdma_devices", rdma_devices),
                            ("master_server_addr", master_server_addr),
                            ("tenant_id", tenant_id)):
            if not isinstance(value, str):
                raise TypeError(f"setup(): {name} must be a str, got {type(value).__name__}")
        for name, value in (("global_segment_size", global_segment_size),
                            ("local_buffer_size", local_buffer_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise TypeError(f"setup(): {name} must be an int >= 0, got {value!r}")
        return cls(local_hostname, metadata_server, int(global_segment_size),
                   int(local_buffer_size), protocol, master_server_addr, tenant_id).checked()

    @classmethod
    def from_dict(cls, config: Mapping[Any, Any]) -> SetupOptions:
        """The config-dict form: every value read as text; sizes as Mooncake parses them,
        defaults as Mooncake's (16 MiB segment and buffer, tcp, 127.0.0.1:50051)."""
        text = {str(key): str(value) for key, value in config.items()}
        sizes = {}
        for name, default in (("global_segment_size", DEFAULT_SEGMENT_SIZE),
                              ("local_buffer_size", DEFAULT_BUFFER_SIZE)):
            size = parse_size(text[name]) if name in text else default
            if size is None:
                raise SetupError(-600, f"invalid size for config key {name!r}: "
                                       f"{text[name]!r} (a number, then B, KB, MB, GB or TB)")
            sizes[name] = size
        return cls(text.get("local_hostname", ""), text.get("metadata_server", ""),
                   sizes["global_segment_size"], sizes["local_buffer_size"],
                   text.get("protocol", DEFAULT_PROTOCOL),
                   text.get("master_server_addr", DEFAULT_MASTER),
                   text.get("tenant_id", DEFAULT_TENANT) or DEFAULT_TENANT,
                   text.get("namespace") or None, text.get("data_dir") or None).checked()

    def checked(self) -> SetupOptions:
        if not self.local_hostname:
            raise SetupError(-600, "missing required config: local_hostname")
        if not self.metadata_server:
            raise SetupError(-600, "missing required config: metadata_server")
        if self.global_segment_size and self.global_segment_size < MIN_SEGMENT_SIZE:
            raise SetupError(-600, f"invalid global_segment_size {self.global_segment_size}: "
                                   f"0 or at least {MIN_SEGMENT_SIZE}")
        if self.local_buffer_size and not \
                MIN_BUFFER_SIZE <= self.local_buffer_size <= MAX_BUFFER_SIZE:
            raise SetupError(-600, f"invalid local_buffer_size {self.local_buffer_size}: 0 "
                                   f"or between {MIN_BUFFER_SIZE} and {MAX_BUFFER_SIZE}")
        if self.protocol not in PROTOCOLS:
            raise SetupError(-1, f"unsupported protocol {self.protocol!r}")
        return self

    def redis_url(self) -> str:
        """master_server_addr when it is a Redis URL; for a Mooncake master's host:port,
        MOONCAKE_REDIS_URL."""
        address = self.master_server_addr
        if "://" in address:
            scheme = address.split("://", 1)[0]
            if scheme not in SUPPORTED_SCHEMES:
                raise SetupError(-600, f"master_server_addr {redact(address)!r}: unknown URL "
                                       f"scheme; use one of " +
                                 ", ".join(f"{s}://" for s in SUPPORTED_SCHEMES))
            return address
        url = os.environ.get(ENV_URL)
        if not url:
            raise SetupError(-600, f"master_server_addr {address!r} is a Mooncake master "
                                   "address and there is no Redis to use instead: pass a "
                                   "redis://, rediss://, redis+cluster:// or memory:// URL "
                                   f"as master_server_addr, or set {ENV_URL}")
        return url

    def namespace_name(self) -> str:
        """The namespace: the config's, else MOONCAKE_REDIS_NAMESPACE, else "mc"; a tenant
        other than "default" is a namespace of its own, `<namespace>.<tenant_id>`."""
        base = self.namespace or os.environ.get(ENV_NAMESPACE) or DEFAULT_NAMESPACE
        return base if self.tenant_id == DEFAULT_TENANT else f"{base}.{self.tenant_id}"

    def data_root(self, namespace: str) -> Path:
        """Where the namespace's segment directories are: shared by every store of the
        namespace that must read another's bytes."""
        named = self.data_dir or os.environ.get(ENV_DATA_DIR)
        if named:
            return Path(named)
        return Path(tempfile.gettempdir()) / "mooncake-redis-data" / namespace


def client_port_range(environ: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """CLIENT_PORTS, or the range the environment gives if Mooncake would accept it."""

    def port(name: str, default: int) -> int:
        try:
            return int(environ.get(name, default))
        except ValueError:
            return -1

    low, high = port("MC_STORE_CLIENT_MIN_PORT", CLIENT_PORTS[0]), \
        port("MC_STORE_CLIENT_MAX_PORT", CLIENT_PORTS[1])

    def allowed(number: int) -> bool:
        return 1024 <= number <= 65535 and not 32768 <= number <= 60999

    return (low, high) if allowed(low) and allowed(high) and low <= high else CLIENT_PORTS


def hold_client_port(rng: random.Random) -> socket.socket:
    """A socket bound to a free port of client_port_range(), held while the store lives
    so no other store of this machine takes it; OSError if none was free."""
    low, high = client_port_range()
    for _ in range(PORT_ATTEMPTS):
        holder = socket.socket()
        try:
            holder.bind(("", rng.randint(low, high)))
            return holder
        except OSError:
            holder.close()
    raise OSError(f"no free port in {low}-{high} after {PORT_ATTEMPTS} tries "
                  "(MC_STORE_CLIENT_MIN_PORT / MC_STORE_CLIENT_MAX_PORT)")

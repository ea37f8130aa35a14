"""What the command modules share (main.py, each command group's module and the
simulator's commands import it; it imports none of them): exit codes, the index a command
opens from --url/--namespace, failing with every password masked, and argument types."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mooncake_redis.connection import PASSWORD_HINT, SUPPORTED_SCHEMES
from mooncake_redis.errors import ConfigurationError, NamespaceNotFound
from mooncake_redis.index import Index
from mooncake_redis.keys import KeySchema
from mooncake_redis.operations.namespaces import namespace_exists
from mooncake_redis.settings import DEFAULT_NAMESPACE, DEFAULT_URL, ENV_NAMESPACE, ENV_URL
from mooncake_redis.urls import database_problem, password_of, redact, secrets_of

OK, FINDING, USAGE = 0, 1, 2
FAILURE = FINDING  # a runtime error exits 1 like a finding: 2 means the command line is wrong
LOOPBACK = "127.0.0.1"
"""Where the metrics exporters listen by default: this machine only (docker-compose.yml
publishes its ports on the host's 127.0.0.1 as well)."""

def url_of(args: argparse.Namespace) -> str:
    return args.url or os.environ.get(ENV_URL) or DEFAULT_URL


def namespace_of(args: argparse.Namespace) -> str:
    return args.namespace or os.environ.get(ENV_NAMESPACE) or DEFAULT_NAMESPACE


def open_index(args: argparse.Namespace, read_only: bool = False, namespace: str | None = None,
               must_exist: bool = False, **settings: Any) -> Index:
    """The index of --url/--namespace. read_only=True writes nothing at open (no setting is
    filled in from the environment); commands that only look must use it. must_exist:
    raise NamespaceNotFound for a namespace that holds nothing (commands that read one)."""
    name = namespace or namespace_of(args)
    if must_exist:  # looked at read-only first: a writable open records the shard count
        probe = Index.from_url(url_of(args), name, read_only=True)
        if not namespace_exists(probe.ctx):
            raise NamespaceNotFound(
                f"namespace {probe.namespace!r} does not exist at {redact(url_of(args))}: "
                "no settings, segments or shard stats (mistyped? `mooncake-redis "
                "namespaces` lists the namespaces there)")
        if read_only:
            return probe
        probe.close()
    return Index.from_url(url_of(args), name, read_only=read_only, **settings)


def fail(message: str, *urls: str, code: int = FAILURE) -> int:
    """Print one `error:` line, with the URLs' passwords masked; returns the exit code
    (FAILURE, or USAGE for a value the command line cannot use)."""
    for url in urls:
        for secret in secrets_of(url):
            message = message.replace(secret, "***")
    print("error: " + re.sub(r"\s*\n\s*", "; ", message.strip()), file=sys.stderr)
    return code


def reader_gone() -> int:
    """stdout's reader went away (`mooncake-redis stats | head -1`): stop quietly, as
    Python's documentation advises (signal module, "Note on SIGPIPE"): what is still
    buffered goes to /dev/null instead of raising again at exit; exit 1, as Python does."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return FAILURE


def at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum {minimum}")
        return value

    return parse


def non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} is below 0")
    return value


def port_number(text: str) -> int:
    """A TCP port to listen on, 1 to 65535."""
    port = at_least(1)(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (1 to 65535)")
    return port


def listen_address(text: str) -> str:
    """An address this machine can listen on: an IP address, or a host name it resolves."""
    try:
        socket.getaddrinfo(text, None, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as error:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an IP address or a host name this machine resolves "
            f"({getattr(error, 'strerror', None) or error})") from None
    return text


def writable_directory(text: str) -> Path:
    """A directory that exists or can be created, and can be written to: checked before a
    long run (by making and removing a directory in its nearest existing ancestor), so a
    run does not end by failing to save what it computed."""
    path = Path(text)
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: {str(existing)!r} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write-check-", dir=existing))
    except OSError as error:
        raise argparse.ArgumentTypeError(
            f"{text!r}: cannot {'write to' if existing == path else 'create it in'} "
            f"{str(existing)!r} ({error.strerror or error})") from None
    return path


def redis_url(text: str) -> str:
    """A URL the client can open (the scheme, the ports and the database are checked here,
    so a mistyped URL is a usage error; whether Redis answers there is found out by the
    command)."""
    if "://" not in text:
        raise argparse.ArgumentTypeError(f"Redis URL {redact(text)!r} must look like "
                                         "redis://host:port/db")
    scheme = urlsplit(text).scheme
    if scheme not in SUPPORTED_SCHEMES:
        raise argparse.ArgumentTypeError(
            f"unknown URL scheme in {redact(text)!r}; use one of "
            + ", ".join(f"{scheme}://" for scheme in SUPPORTED_SCHEMES))
    for port in _ports(text) if scheme in ("redis", "rediss", "redis+cluster") else ():
        if not (port.isdigit() and 0 < int(port) < 65536):
            hint = f"; {PASSWORD_HINT}" if password_of(text) and not port.isdigit() else ""
            raise argparse.ArgumentTypeError(
                f"Redis URL {redact(text)!r}: port {port!r} is not a number from 1 to "
                f"65535{hint}")
    problem = database_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def _ports(url: str) -> list[str]:
    """The ports a redis://, rediss:// or redis+cluster:// URL names: its hosts follow the
    last '@' (a password may hold any character) up to the first '/' or '?'."""
    hosts = url.split("://", 1)[1].rpartition("@")[2].split("/", 1)[0].split("?", 1)[0]
    return [host.rpartition(":")[2] for host in hosts.split(",")
            if ":" in host and not host.endswith("]")]  # [::1] alone: the default port


def namespace_name(text: str) -> str:
    """A namespace the key schema accepts (else a usage error)."""
    try:
        KeySchema(text)
    except ConfigurationError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def add_json_option(parser: argparse.ArgumentParser, sub_command: bool = False) -> None:
    """--json; on a sub-command of a command that has it too, one that leaves the
    command's own alone (argparse lets a sub-parser's default overwrite it)."""
    parser.add_argument("--json", action="store_true",
                        default=argparse.SUPPRESS if sub_command else False,
                        help="print one JSON document on stdout instead of text (same exit "
                             "codes; an infinite score is the string \"inf\")")


def jsonable(value: Any) -> Any:
    """Dataclasses as dicts, tuples as lists, infinite floats as "inf"/"-inf" (JSON has no
    infinity)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def print_json(document: Any) -> None:
    print(json.dumps(jsonable(document), indent=2, allow_nan=False))

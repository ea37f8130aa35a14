"""Redis URLs as text: with every password masked (`redact`, for error messages, logs and
the CLI's output), the passwords a URL carries, and the redis-cli flags that reach the
same Redis (never with its password). Imports nothing of the package: connection.py and
every module that prints a URL use it."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

_SECRET_QUERY_NAMES = ("password",)


def password_of(url: object) -> str | None:
    """The password in a URL's userinfo, as written (None if it has none). The userinfo
    runs from the scheme to the LAST '@': a password may hold any character, even an
    unencoded '#', '?', '/' or '@' that a URL parser would take for a delimiter, and must
    be found all the same to be kept out of messages."""
    text = str(url)
    userinfo, at, _ = text.partition("://")[2].rpartition("@") if "://" in text \
        else text.rpartition("@")
    if not at:
        return None
    if ":" not in userinfo:
        return None if "://" in text else userinfo  # no scheme: take it all for a secret
    return userinfo.split(":", 1)[1]


def redact(url: object) -> str:
    """The URL with any password (in its userinfo, or a password= query parameter)
    replaced by ***, safe for error messages and logs."""
    text = str(url)
    if password_of(text) is not None:
        head, separator, rest = text.partition("://")
        userinfo, _, hosts = (rest if separator else head).rpartition("@")
        user = userinfo.split(":", 1)[0] if ":" in userinfo else ""
        text = f"{head}{separator}{user}:***@{hosts}" if separator else f"***@{hosts}"
    try:
        parts = urlsplit(text)
    except ValueError:
        return "<unparseable URL>"
    if "password=" not in parts.query.lower():
        return text
    query = "&".join(f"{name}=***" if name.lower() in _SECRET_QUERY_NAMES
                     else f"{name}{equals}{value}"
                     for name, equals, value in (item.partition("=")
                                                 for item in parts.query.split("&")))
    return urlunsplit(parts._replace(query=query))


def database_problem(url: str) -> str | None:
    """What is wrong with the database of a redis:// or rediss:// URL (its path, after the
    hosts that follow the last '@'), or None: redis-py reads `/abc` as database 0 without
    a word, so a mistyped database would quietly be another one."""
    scheme, separator, rest = url.partition("://")
    if not separator or scheme not in ("redis", "rediss"):
        return None
    database = rest.rpartition("@")[2].partition("?")[0].partition("/")[2]
    if database.strip("/").isdigit() or not database.strip("/"):
        return None
    return (f"Redis URL {redact(url)!r}: database {unquote(database)!r} is not a number "
            "(redis://host:port/DB, DB from 0)")


safe_url = redact
"""The name the CLI's output calls redact by."""


def secrets_of(url: str) -> list[str]:
    """The passwords a URL carries (in its userinfo or query), to scrub them from messages."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = [parts.password] if parts.password else []
    password = password_of(url)  # also one written unencoded, or in a cluster URL
    if password:
        found += [password, unquote(password)]
    for name, values in parse_qs(parts.query).items():
        if name.lower() in _SECRET_QUERY_NAMES:
            found += values
    return [secret for secret in found if secret]


@dataclass(frozen=True)
class RedisCli:
    """redis-cli with the connection flags of a URL: host, port, database, TLS, user; never
    its password (redis-cli reads one from REDISCLI_AUTH, see password_note)."""

    flags: tuple[str, ...]
    needs_password: bool = False

    @property
    def password_note(self) -> str:
        return ("(the URL has a password, not printed: export REDISCLI_AUTH=<password> first)"
                if self.needs_password else "")

    @classmethod
    def for_url(cls, url: str) -> RedisCli | None:
        """None for memory://, an in-process store no redis-cli can reach."""
        parts = urlsplit(url)
        if parts.scheme == "memory":
            return None
        query = {name: values[-1] for name, values in parse_qs(parts.query).items()}
        flags: list[str] = []
        if parts.scheme == "unix":
            flags += ["-s", parts.path]
        else:
            host, port = _host_port(parts.netloc.rpartition("@")[2].split(",")[0])
            if parts.scheme == "redis+cluster":
                flags.append("-c")  # a cluster has database 0 only
            flags += ["-h", host, "-p", port]
        if parts.scheme != "redis+cluster":
            path_database = parts.path.strip("/") if parts.scheme != "unix" else ""
            flags += ["-n", query.get("db") or path_database or "0"]
        if parts.scheme == "rediss":
            flags.append("--tls")
            if query.get("ssl_ca_certs"):
                flags += ["--cacert", query["ssl_ca_certs"]]
            if query.get("ssl_cert_reqs", "").lower() == "none":
                flags.append("--insecure")
        username = unquote(parts.username) if parts.username else query.get("username")
        if username:
            flags += ["--user", username]
        return cls(tuple(flags), bool(secrets_of(url)))

    def command(self, *words: str) -> str:
        return " ".join(shlex.quote(w) for w in ("redis-cli", *self.flags, *words))


def _host_port(netloc: str) -> tuple[str, str]:
    """(host, port) of `host`, `host:port`, `[v6]` or `[v6]:port`, with redis-cli defaults."""
    if netloc.startswith("["):
        host, _, rest = netloc[1:].partition("]")
        port = rest.lstrip(":")
    else:
        host, _, port = netloc.partition(":")
    return host or "localhost", port or "6379"

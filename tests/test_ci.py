"""CI runs what it claims: a Python version it is asked for is tested or fails the run
(never skipped with exit 0), and the side-by-side tests with the real Mooncake fail
instead of skipping once CI says the peer is installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from clock import CHILD_GUARD_S

ROOT = Path(__file__).resolve().parents[1]


def test_a_python_that_cannot_be_found_or_installed_fails_the_run(tmp_path: Path) -> None:
    """3.99 exists nowhere: uv (a stand-in that fails, as `uv python install` does
    without its download site) cannot install it, nor can the distribution."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "uv").write_text("#!/bin/sh\necho \"uv $*: no such version\" >&2\nexit 2\n")
    (bin_dir / "uv").chmod(0o755)
    result = subprocess.run(["bash", str(ROOT / "scripts" / "test_pythons.sh"), "3.99"],
                            capture_output=True, text=True, timeout=CHILD_GUARD_S,
                            env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "uv python install 3.99" in result.stderr and "uv python install 3.99: no such " \
        "version" in result.stderr
    assert result.stdout.splitlines()[-1] == ("python3.99: FAILED: not installed, and it "
                                              "could not be installed")
    assert not (ROOT / ".venv-python3.99").exists()


def test_the_side_by_side_tests_fail_when_the_peer_is_required_but_missing(
        tmp_path: Path) -> None:
    missing = tmp_path / "no-peer" / "bin" / "python"
    environment = {**os.environ, "MOONCAKE_PEER_PYTHON": str(missing)}
    test = "tests/test_benchmarks.py::test_side_by_side_runs_the_mooncake_master_where_installed"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
               "-rs", test]
    skipped = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                             timeout=CHILD_GUARD_S,
                             env={k: v for k, v in environment.items()
                                  if k != "MOONCAKE_PEER_REQUIRED"})
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout
    failed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                            timeout=CHILD_GUARD_S,
                            env={**environment, "MOONCAKE_PEER_REQUIRED": "1"})
    assert failed.returncode == 1 and "1 failed" in failed.stdout, failed.stdout
    assert "$MOONCAKE_PEER_REQUIRED is set" in failed.stdout


def test_ci_installs_the_peer_and_requires_it_before_the_suite() -> None:
    steps = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if line and not line.startswith("#")]
    assert steps.index("export MOONCAKE_PEER_REQUIRED=1") \
        < steps.index("bash scripts/install_mooncake_peer.sh") \
        < steps.index("bash scripts/test.sh -q")

"""A built wheel, installed in a fresh venv (not editable), finds its Lua scripts; it is
built without deprecation warnings and carries its license and metadata."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SMOKE = """
import mooncake_redis, pathlib, sys
assert "site-packages" in mooncake_redis.__file__, mooncake_redis.__file__
index = mooncake_redis.Index.from_url("memory://")
h = "ab" * 32
index.put_start(h + "_0_k", 10)
index.put_end(h + "_0_k")
assert index.get_keys_by_prefix(h) == [h + "_0_k"]
from mooncake_redis.workers import __name__ as workers
print("ok")
"""


def test_wheel_in_a_fresh_venv_runs_the_scripts(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir",
                            str(tmp_path / "dist"), str(ROOT)],
                           check=True, capture_output=True, text=True, timeout=300)
    assert "DeprecationWarning" not in built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("mooncake_redis-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata_name,) = [name for name in names if name.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
        (license_name,) = [name for name in names if name.endswith("/licenses/LICENSE")]
        assert "Apache License" in archive.read(license_name).decode()
    assert metadata["License-Expression"] == "Apache-2.0"
    assert "Typing :: Typed" in metadata.get_all("Classifier")
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    str(wheel)], check=True, capture_output=True, timeout=600)
    result = subprocess.run([str(python), "-c", SMOKE], capture_output=True, text=True,
                            cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    cli = subprocess.run([str(tmp_path / "venv" / "bin" / "mooncake-redis"), "--help"],
                         capture_output=True, text=True, timeout=120)
    assert "demo" in cli.stdout

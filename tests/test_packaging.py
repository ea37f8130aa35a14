"""A built wheel, installed in a fresh venv (not editable), finds its Lua scripts; it is
built without deprecation warnings and carries its license and metadata."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = "https://github.com/mooncake-redis/mooncake-redis"

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
    assert f"Homepage, {REPOSITORY}" in metadata.get_all("Project-URL")
    assert f"Changelog, {REPOSITORY}/blob/main/CHANGELOG.md" in metadata.get_all("Project-URL")
    assert "rq>=1.16" in metadata.get_all("Requires-Dist")  # a dependency: the card's package
    assert "Provides-Extra: rq" in str(metadata)  # kept: `mooncake-redis[rq]` still installs
    assert "Typing :: Typed" in metadata.get_all("Classifier")
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    str(wheel)], check=True, capture_output=True, timeout=600)
    result = subprocess.run([str(python), "-c", SMOKE], capture_output=True, text=True,
                            cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    command = str(tmp_path / "venv" / "bin" / "mooncake-redis")
    cli = subprocess.run([command, "--help"], capture_output=True, text=True, timeout=120)
    assert "demo" in cli.stdout
    # `pip install mooncake-redis && mooncake-redis demo` works without the extras ...
    demo = subprocess.run([command, "demo", "--conversations", "1", "--turns", "2"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert demo.returncode == 0, demo.stderr
    # ... and so does a worker: rq is a dependency, the queue the index's Redis by default
    plain = {k: v for k, v in os.environ.items() if not k.startswith("MOONCAKE_REDIS_")}
    worker = subprocess.run([command, "worker", "--burst", "--url", "memory://"], env=plain,
                            capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert worker.returncode == 0, worker.stderr
    assert "eviction queue memory://" in worker.stderr


def test_pdoc_writes_the_api_reference_with_the_index_page(tmp_path: Path) -> None:
    """What scripts/api_docs.sh runs, in process: the page of the package documents Index
    and its methods from their docstrings."""
    import pdoc

    script = (ROOT / "scripts" / "api_docs.sh").read_text()
    modules = re.findall(r"mooncake_redis[\w.]*", script.split('"$@"', 1)[1])
    assert modules == ["mooncake_redis", "mooncake_redis.operations.metrics"]
    pdoc.pdoc(*modules, output_directory=tmp_path)
    page = (tmp_path / "mooncake_redis.html").read_text()
    assert 'id="Index"' in page and 'id="Index.batch_put_start"' in page
    assert "one Result per item" in page and "wait_ms" in page  # docstrings, as written
    assert 'id="Exporter.count_this_process"' in (tmp_path / "mooncake_redis" / "operations" /
                                                  "metrics.html").read_text()
    assert (tmp_path / "index.html").exists()


def test_the_sdist_carries_what_the_readme_points_pip_users_at(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--outdir", str(tmp_path),
                    str(ROOT)], check=True, capture_output=True, text=True, timeout=300)
    (sdist,) = tmp_path.glob("mooncake_redis-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    wanted = {"examples/file_data_plane.py", "deploy/redis.conf",
              "deploy/grafana/mooncake-redis.json", "docker-compose.yml", "Dockerfile",
              "CHANGELOG.md", *(f"docs/{doc.name}" for doc in (ROOT / "docs").glob("*.md"))}
    assert wanted <= names, sorted(wanted - names)


MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_docs_link_only_to_files_in_the_repository() -> None:
    """A link (or a path given to run) that leaves the repository works on one machine
    only: a reader's clone has no ../shared."""
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        text = doc.read_text()
        assert "../shared" not in text, doc.name
        for target in MARKDOWN_LINK.findall(text):
            if target.startswith(("http://", "https://", "#", "mailto:")):
                continue
            path = (doc.parent / target.split("#", 1)[0]).resolve()
            assert path.is_relative_to(ROOT) and path.exists(), (doc.name, target)

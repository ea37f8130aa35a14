"""No import cycles in the package, hidden ones included: an import inside a function
counts as much as one at the top of a module (a deferred import that dodges a cycle still
ties the two modules together)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import mooncake_redis

PACKAGE = Path(mooncake_redis.__file__).parent
ROOT = PACKAGE.parent
PYPROJECT = (ROOT / "pyproject.toml").read_text()  # no tomllib on 3.10


def package_dirs() -> dict[str, Path]:
    """pyproject.toml's package-dir mapping: package name -> its folder (lua/ and workers/
    sit at the top of the repository and install as mooncake_redis.lua and .workers)."""
    table = re.search(r"^\[tool\.setuptools\.package-dir\]\n(.*?)(?:^\[|\Z)", PYPROJECT,
                      re.MULTILINE | re.DOTALL)
    assert table is not None, "pyproject.toml has no [tool.setuptools.package-dir]"
    return {name: ROOT / folder
            for name, folder in re.findall(r'^"([\w.]+)" = "([\w./]+)"$', table.group(1),
                                           re.MULTILINE)}


FOLDERS = package_dirs()


def module_name(path: Path) -> str:
    """The import name of a file, through the package-dir mapping (longest folder first)."""
    for package, folder in sorted(FOLDERS.items(), key=lambda item: -len(item[0])):
        if path.is_relative_to(folder):
            parts = [*package.split("."), *path.relative_to(folder).with_suffix("").parts]
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise AssertionError(f"{path} is in no folder pyproject.toml installs")


def imports_of(path: Path) -> set[str]:
    """The package's modules this file imports, anywhere in it."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] \
                if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            candidates = [target] + [f"{target}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found |= {c for c in candidates if c in MODULES}
    return found - {name}


MODULES = {module_name(path): path for folder in set(FOLDERS.values())
           for path in folder.rglob("*.py")}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        stack.append(module)
        for dependency in sorted(graph[module]):
            if state.get(dependency) == 1:
                return stack[stack.index(dependency):] + [dependency]
            if dependency not in state and (cycle := visit(dependency)):
                return cycle
        stack.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def test_the_package_has_no_import_cycle() -> None:
    graph = {name: imports_of(path) for name, path in MODULES.items()}
    # a package's __init__ re-exporting its modules is not a cycle with them
    for name in graph:
        graph[name] -= {other for other in MODULES if name.startswith(other + ".")
                        and MODULES[other].name == "__init__.py"}
    assert len(graph) > 40 and graph["mooncake_redis.cli.main"], "the scan found no imports"
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_check_sees_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_every_installed_package_is_a_folder_the_scan_sees() -> None:
    """Each package pyproject.toml installs is a folder the scan above reads, under its
    import name: the package's own folders, and lua/ and workers/ at the top through the
    package-dir mapping, so the layer and cycle checks cover all of the code."""
    assert FOLDERS["mooncake_redis.lua"] == ROOT / "lua"
    assert FOLDERS["mooncake_redis.workers"] == ROOT / "workers"
    listed = re.search(r"^packages = \[(.*?)\]", PYPROJECT, re.MULTILINE | re.DOTALL)
    assert listed is not None
    packages = re.findall(r'"([\w.]+)"', listed.group(1))
    for package in packages:
        mapped = FOLDERS.get(package)
        folder = mapped if mapped is not None else ROOT.joinpath(*package.split("."))
        assert (folder / "__init__.py").is_file(), package
    assert {"mooncake_redis.workers.jobs", "mooncake_redis.workers.worker",
            "mooncake_redis.lua"} <= set(MODULES)


LAYERS: list[list[tuple[str, tuple[str, ...]]]] = [
    [("core", ("errors", "urls", "text", "prefix", "keys", "models", "values", "validation",
               "settings", "segment_registry", "connection", "observers", "executor",
               "layouts", "scripts", "shard_layout", "context", "lua"))],
    [("tree", ("tree",))],
    [("capacity", ("capacity",))],
    [("store", ("store",))],
    [("operations", ("operations",))],
    [("workers", ("workers",))],
    [("facade", ("index", ""))],
    [("files", ("files",))],
    # what every command shares sits below the commands: the simulator's commands use it too
    [("cli.support", ("cli.support",))],
    [("engines", ("engines",)), ("mooncake", ("mooncake",)), ("sim", ("sim",))],
    [("cli", ("cli", "__main__"))],
]
"""The package's layers, lowest first (docs/ARCHITECTURE.md draws them): a module imports
modules of lower layers, and of its own layer only within its own group. A group names
top-level folders or modules (`""` is the package's __init__); the longest name that
matches a module places it."""


def group_of(module: str) -> tuple[int, str]:
    """(layer, group) of a module of the package, by the longest matching name."""
    relative = module.removeprefix("mooncake_redis").removeprefix(".")
    best: tuple[int, int, str] | None = None
    for rank, groups in enumerate(LAYERS):
        for group, names in groups:
            for name in names:
                matches = relative == name or (name and relative.startswith(name + "."))
                if matches and (best is None or len(name) > best[0]):
                    best = (len(name), rank, group)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS")
    return best[1], best[2]


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, dependencies in sorted(graph.items()):
        rank, group = group_of(module)
        for dependency in sorted(dependencies):
            their_rank, their_group = group_of(dependency)
            if their_rank > rank or (their_rank == rank and their_group != group):
                found.append(f"{module} ({group}) imports {dependency} ({their_group})")
    return found


def test_every_import_runs_down_the_layers() -> None:
    graph = {name: imports_of(path) for name, path in MODULES.items()}
    groups = {group_of(name)[1] for name in graph}
    assert groups == {group for layer in LAYERS for group, _ in layer}, "a group is empty"
    assert layer_violations(graph) == []


def test_the_layer_check_sees_an_import_running_up() -> None:
    assert layer_violations({
        "mooncake_redis.tree.links": {"mooncake_redis.context", "mooncake_redis.store.objects"},
        "mooncake_redis.sim.cli": {"mooncake_redis.cli.support", "mooncake_redis.cli.main"},
        "mooncake_redis.engines.sglang.hicache": {"mooncake_redis.mooncake.store"},
        "mooncake_redis.store.objects": {"mooncake_redis.store.deletion"},
    }) == [
        "mooncake_redis.engines.sglang.hicache (engines) imports mooncake_redis.mooncake.store "
        "(mooncake)",
        "mooncake_redis.sim.cli (sim) imports mooncake_redis.cli.main (cli)",
        "mooncake_redis.tree.links (tree) imports mooncake_redis.store.objects (store)",
    ]
    assert group_of("mooncake_redis") == group_of("mooncake_redis.index")
    assert group_of("mooncake_redis.cli.support")[1] == "cli.support"
    assert group_of("mooncake_redis.cli.render")[1] == "cli"

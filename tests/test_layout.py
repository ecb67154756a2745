"""The package tree is the architecture: these tests keep it so.

* ``client/tlog`` is C2SP and RFC 9162 only: it imports nothing of deplog but itself,
  the base errors and the atomic files, so another project could lift it out whole.
* ``client/plumbing`` is what every part shares and nothing of deplog's model (files,
  the connection protocol, database faults, progress, waits): it imports only itself
  and the base errors.
* ``authority/witness`` is a standalone tlog-witness: base errors, ``client/tlog``,
  ``client/plumbing`` and the shared HTTP plumbing, nothing of the log.
* ``client`` never imports ``authority``; nothing imports top-level ``client`` or
  ``authority`` (they install as ``deplog.client`` and ``deplog.authority``).
* The authority is layered (``AUTHORITY_LAYERS``): storage, then the log, then
  publication, then HTTP, then the command line, over a foundation any layer may use.
  A module imports nothing of a layer above its own; the standalone witness is used
  from publication up.
* No module imports another that imports it back, however indirectly, type-only
  imports included.
* Every module declares ``__all__``; what it defines and leaves out is private.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.doctext import section

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = {"deplog.client": ROOT / "client", "deplog.authority": ROOT / "authority"}


def modules() -> Iterator[tuple[str, Path]]:
    """Every module of the two packages, by its installed dotted name."""
    for prefix, directory in PACKAGE_DIRS.items():
        for path in sorted(directory.rglob("*.py")):
            parts = path.relative_to(directory).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join((prefix, *parts)), path


def imports_of(path: Path, module: str) -> set[str]:
    """Every module ``path`` imports, anywhere in the file, resolved to absolute names."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def deplog_imports(path: Path, module: str) -> set[str]:
    return {
        name
        for name in imports_of(path, module)
        if name.split(".")[0] in ("deplog", "client", "authority")
    }


def existing(names: set[str]) -> set[str]:
    """Only the names that are modules (``from a import b`` may import a function b)."""
    known = {name for name, _ in modules()}
    return {name for name in names if name in known}


MODULES = list(modules())


def test_the_installed_packages_are_every_package_directory() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    directories = {name for name, path in MODULES if path.name == "__init__.py"}
    assert set(config["packages"]) == directories
    assert config["package-dir"] == {"deplog.client": "client", "deplog.authority": "authority"}


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[m for m, _ in MODULES])
def test_nothing_imports_top_level_client_or_authority(module: str, path: Path) -> None:
    bare = {n for n in deplog_imports(path, module) if n.split(".")[0] != "deplog"}
    assert not bare


@pytest.mark.parametrize(
    ("module", "path"),
    [(m, p) for m, p in MODULES if m.startswith("deplog.client")],
    ids=[m for m, _ in MODULES if m.startswith("deplog.client")],
)
def test_client_never_imports_authority(module: str, path: Path) -> None:
    assert not {n for n in deplog_imports(path, module) if n.startswith("deplog.authority")}


def allowed(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(in_package(name, p) for p in prefixes)


TLOG_MAY_IMPORT = (
    "deplog.client.tlog",
    "deplog.client.errors",
    "deplog.client.plumbing.files",  # key files written whole; the standard library only
)
PLUMBING_MAY_IMPORT = ("deplog.client.plumbing", "deplog.client.errors")
WITNESS_MAY_IMPORT = (
    "deplog.authority.witness",
    "deplog.client.tlog",
    "deplog.client.errors",
    # Atomic writes and locks, database faults and the connection protocol (the embedded
    # witness's state can live in the log's shared database): nothing of the log.
    "deplog.client.plumbing",
    # The HTTP plumbing both servers share: middleware and serve loop, metrics, statuses.
    "deplog.authority.http.plumbing",
    "deplog.authority.http.metrics",
    "deplog.authority.http.status",
    # Command-line options built from config dataclasses; how commands end.
    "deplog.authority.options",
    "deplog.authority.command",
)


def in_package(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


# ``witness serve --verify-map`` folds deplog entries: its one module may read them, the
# map code and the follower's bounded HTTP source; the rest of the witness may not.
MAP_WITNESS = "deplog.authority.witness.mapverify"
MAP_WITNESS_MAY_IMPORT = (
    *WITNESS_MAY_IMPORT,
    "deplog.client.map",
    "deplog.client.model",
    "deplog.client.follow.http",
)

STANDALONE = [
    (module, path, rules)
    for package, rules in (
        ("deplog.client.tlog", TLOG_MAY_IMPORT),
        ("deplog.client.plumbing", PLUMBING_MAY_IMPORT),
        ("deplog.authority.witness", WITNESS_MAY_IMPORT),
    )
    for module, path in MODULES
    if in_package(module, package) and module != MAP_WITNESS
] + [(module, path, MAP_WITNESS_MAY_IMPORT) for module, path in MODULES if module == MAP_WITNESS]


@pytest.mark.parametrize(
    ("module", "path", "may_import"), STANDALONE, ids=[m for m, _, _ in STANDALONE]
)
def test_standalone_packages_import_only_what_they_may(
    module: str, path: Path, may_import: tuple[str, ...]
) -> None:
    imported = existing(deplog_imports(path, module)) | {
        n for n in deplog_imports(path, module) if n.count(".") <= 2
    }
    outside = {n for n in imported if not allowed(n, may_import)}
    # "from deplog.client import errors"-style parents are fine when the leaf is allowed
    outside -= {"deplog.client", "deplog.authority", "deplog.authority.http"}
    assert not outside


# The authority's layers, lowest first: each module may import its own layer and those
# below, never one above. A module belongs to the longest prefix listed.
AUTHORITY_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Command-line options, how commands end, the config file, supervised background
    # tasks, metrics read at scrape time: nothing of the log.
    (
        "foundation",
        (
            "deplog.authority.options",
            "deplog.authority.command",
            "deplog.authority.config",
            "deplog.authority.supervise",
            "deplog.authority.collectors",
        ),
    ),
    # The Database interface and its backends, the queries they share, storage errors.
    ("storage", ("deplog.authority.storage",)),
    # The one writer, its replay, the sequencer that drives it, the tiles it writes.
    (
        "log",
        (
            "deplog.authority.log",
            "deplog.authority.replay",
            "deplog.authority.sequencer",
            "deplog.authority.tiles",
        ),
    ),
    # What is served, and the witnesses that must cosign it first.
    ("publication", ("deplog.authority.publication", "deplog.authority.witnessing")),
    # The API, the explorer and the HTTP plumbing they share.
    ("http", ("deplog.authority.http", "deplog.authority.explorer")),
    ("cli", ("deplog.authority.cli",)),
)
# The standalone witness keeps to its own allowlist (above); the log's side of
# witnessing is the lowest layer that may use it.
WITNESS = "deplog.authority.witness"
WITNESS_USED_FROM = "publication"
LAYER_NAMES = [name for name, _ in AUTHORITY_LAYERS]


def layer_of(module: str) -> int | None:
    """The index of ``module``'s layer, or None outside the layers (the client, the
    package itself, the witness)."""
    if in_package(module, WITNESS):
        return LAYER_NAMES.index(WITNESS_USED_FROM)
    found = [
        (len(prefix), rank)
        for rank, (_, prefixes) in enumerate(AUTHORITY_LAYERS)
        for prefix in prefixes
        if in_package(module, prefix)
    ]
    return max(found)[1] if found else None


def module_imports(path: Path, module: str) -> set[str]:
    """The deplog modules ``path`` imports, anywhere in the file (``if TYPE_CHECKING``
    and inside functions included): ``from a import b`` is ``a.b`` when that is a
    module, else ``a``."""
    known = {name for name, _ in MODULES}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                name = f"{base}.{alias.name}"
                if name in known:
                    found.add(name)
                elif base in known:
                    found.add(base)
    found.discard(module)
    return found


LAYERED = [
    (module, path)
    for module, path in MODULES
    if layer_of(module) is not None and not in_package(module, WITNESS)
]


def test_every_authority_module_outside_the_witness_has_a_layer() -> None:
    unplaced = {
        module
        for module, _ in MODULES
        if in_package(module, "deplog.authority")
        and module != "deplog.authority"
        and layer_of(module) is None
    }
    assert not unplaced, "add the module to AUTHORITY_LAYERS"


@pytest.mark.parametrize(("module", "path"), LAYERED, ids=[m for m, _ in LAYERED])
def test_no_authority_module_imports_a_layer_above_its_own(module: str, path: Path) -> None:
    own = layer_of(module)
    assert own is not None
    above = {
        f"{name} ({LAYER_NAMES[rank]})"
        for name in module_imports(path, module)
        if (rank := layer_of(name)) is not None and rank > own
    }
    assert not above, f"a {LAYER_NAMES[own]} module imports a layer above it"


def test_no_module_imports_one_that_imports_it_back() -> None:
    """Tarjan's strongly connected components over every import: each must be one module."""
    graph = {module: module_imports(path, module) for module, path in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    assert not cycles


def documented_modules() -> set[str]:
    """The modules README.md and docs/ name (``deplog.client.x.y``, or one of its names)."""
    named = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for found in re.finditer(r"deplog\.client(?:\.[a-z_]+)+", page.read_text()):
            parts = found.group(0).split(".")
            for end in range(len(parts), 2, -1):
                if ROOT.joinpath("client", *parts[2:end]).with_suffix(".py").is_file():
                    named.add(".".join(parts[:end]))
                    break
    return named


PUBLIC = documented_modules()


@pytest.mark.parametrize(
    ("module", "path"),
    [(m, p) for m, p in MODULES if p.name != "__init__.py"],
    ids=[m for m, p in MODULES if p.name != "__init__.py"],
)
def test_only_the_modules_the_docs_name_declare_public_names(module: str, path: Path) -> None:
    """The public API is what the docs show a user importing; every other module is
    internal, however its names are spelled, and declares nothing."""
    loaded = importlib.import_module(module)
    declared = getattr(loaded, "__all__", None)
    if module not in PUBLIC:
        assert declared is None, "an internal module declares __all__: the docs name it not"
        return
    assert declared is not None, "the docs name this module: declare its public names"
    assert all(hasattr(loaded, name) for name in declared)
    defined = {
        node.name
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    undeclared = {name for name in defined if not name.startswith("_")} - set(declared)
    assert not undeclared, "public but not in __all__: make it private or declare it"


def test_the_public_api_is_what_the_readme_uses() -> None:
    import deplog.client as api

    expected = {
        "Decision",
        "DeplogError",
        "Follower",
        "Guard",
        "GuardedCache",
        "Policy",
        "SyncFollower",
        "Verdict",
        "Verifier",
        "verify_listing",
        "verify_receipt",
        "verify_tool_status",
    }
    assert set(api.__all__) == expected
    for name in expected:
        assert getattr(api, name).__module__.startswith("deplog.client.")


def test_importing_tlog_does_not_load_the_follower() -> None:
    code = (
        "import sys, deplog.client.tlog.checkpoint; "
        "print(any(m.startswith(('deplog.client.follow', 'aiohttp')) for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_authority_and_the_test_fixtures_import_without_the_postgres_extra() -> None:
    """An install without ``deplog[postgres]`` (the quick start, the mcp1 CI venv) must run."""
    code = (
        "import sys; sys.modules['psycopg'] = None; "
        "import deplog.authority.cli, deplog.authority.witness.cli, deplog.client.cli.main, "
        "tests.builders; print('psycopg' in sys.modules and sys.modules['psycopg'] is not None)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_an_installed_wheel_lives_beside_a_foreign_client_package(tmp_path: Path) -> None:
    """A gateway may have its own ``client`` module: ours installs as ``deplog.client``."""
    wheels, site, foreign = tmp_path / "wheels", tmp_path / "site", tmp_path / "foreign"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = wheels.glob("deplog-*.whl")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    assert not (site / "client").exists() and not (site / "authority").exists()
    (foreign / "client").mkdir(parents=True)
    (foreign / "client" / "__init__.py").write_text("WHO = 'the gateway'\n")
    code = (
        "import client, deplog.client, deplog.authority.cli; "
        "from deplog.client import Follower, Guard; "
        "print(client.WHO, deplog.client.__file__, Follower.__module__, Guard.__module__)"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(foreign), str(site)]))
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    who, location, follower, guard = out.stdout.rsplit(maxsplit=3)
    assert who == "the gateway"
    assert Path(location).is_relative_to(site)
    assert (follower, guard) == ("deplog.client.follow.follower", "deplog.client.cache.guard")


def test_the_architecture_layout_names_every_sub_package() -> None:
    layout = section(ROOT / "docs" / "architecture.md", "## Layout")
    packages = {name for name, path in MODULES if path.name == "__init__.py"}
    for package in packages:
        directory = package.removeprefix("deplog.").split(".")
        label = f"{directory[-1]}/" if len(directory) > 1 else f"{directory[0]}/"
        assert label in layout, f"docs/architecture.md Layout lacks {package}"


@pytest.mark.slow
def test_building_the_package_prints_no_setuptools_warning(tmp_path: Path) -> None:
    """What ``pip install .`` builds, built with a current pip and setuptools: the explorer's
    asset folders are package data, not packages setuptools would warn about."""
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    output = built.stdout + built.stderr
    assert "Warning" not in output, [line for line in output.splitlines() if "Warning" in line]

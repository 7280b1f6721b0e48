"""Package layout: the top-level folders are installed as `starscan.*` subpackages; the
`gc/` folder never shadows Python's built-in `gc`; the IDLs are package data."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.resources
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[2]
#: The kernel's sub-packages (starscan/<name>/), each a layer.
KERNEL_PACKAGES = {f"starscan.{p.parent.name}" for p in (REPO / "starscan").glob("*/__init__.py")}
FOLDERS = {"starscan": "starscan", "starscan.planner": "planner", "starscan.provider": "provider",
           "starscan.gc": "gc", "starscan.idl": "idl", "starscan.planner.mysql": "planner/mysql",
           "starscan.provider.push": "provider/push", "starscan.planner.flight_sql": "planner/flight_sql",
           "starscan.client": "starscan/client", "starscan.planner.statements": "planner/statements",
           "starscan.planner.thrift_relay": "planner/thrift_relay"}


def test_builtin_gc_is_the_builtin():
    import gc

    assert gc.__spec__.origin == "built-in"
    assert gc.__spec__.loader is importlib.machinery.BuiltinImporter
    assert callable(gc.collect) and callable(gc.get_objects)
    assert isinstance(gc.collect(), int)
    assert sys.modules["gc"] is gc


def test_builtin_gc_with_repo_root_on_sys_path():
    code = "\n".join([
        "import sys",
        f"sys.path.insert(0, {str(REPO)!r})",
        "import gc",
        "assert gc.__spec__.origin == 'built-in', gc.__spec__",
        "assert isinstance(gc.collect(), int)",
        "import starscan.gc, starscan.gc.reaper",
        "assert starscan.gc is not gc",
        "assert sys.modules['gc'] is gc",
        "import gc as again",
        "assert again is gc and again.__spec__.origin == 'built-in'",
        "print('ok', starscan.gc.__file__)",
    ])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok ")
    assert Path(out.stdout.split(" ", 1)[1].strip()) == REPO / "gc" / "__init__.py"


def test_starscan_gc_is_the_reaper_package():
    import gc

    import starscan.gc
    from starscan.gc import reaper
    from starscan.gc.reaper import ScanContextReaper

    assert starscan.gc is not gc
    assert Path(starscan.gc.__file__).resolve() == REPO / "gc" / "__init__.py"
    assert Path(reaper.__file__).resolve() == REPO / "gc" / "reaper.py"
    assert starscan.gc.__spec__.name == "starscan.gc"

    # And it works: one tick reaps an idle context, and only that one.
    from starscan.provider.contexts import ScanContextManager

    contexts = ScanContextManager()
    idle = contexts.create(1)
    fresh = contexts.create(1)
    idle.last_access -= 3600
    r = ScanContextReaper(contexts, 3600)
    assert r.tick() == 1
    assert [c.context_id for c in contexts.snapshot()] == [fresh.context_id]
    assert r.reaped_total == 1


@pytest.mark.parametrize("name, folder", sorted(FOLDERS.items()))
def test_subpackages_come_from_their_folders(name, folder):
    module = importlib.import_module(name)
    assert Path(module.__file__).resolve() == REPO / folder / "__init__.py"


@pytest.mark.parametrize("top", ["planner", "provider", "idl"])
def test_folders_are_not_top_level_packages(tmp_path, top):
    out = subprocess.run([sys.executable, "-c", f"import {top}"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "ModuleNotFoundError" in out.stderr


def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def test_sources_import_through_starscan_only():
    """`from provider.x import y` would only work with the repo root on sys.path."""
    bad = []
    for folder in FOLDERS.values():
        for path in sorted((REPO / folder).rglob("*.py")):
            for lineno, module in _imports(path):
                root = module.split(".")[0]
                if root in ("planner", "provider", "idl") or module.startswith("gc."):
                    bad.append(f"{path.relative_to(REPO)}:{lineno}: {module}")
    assert bad == []


def test_idl_files_are_package_data():
    from starscan.core import thrift_defs

    idl_dir = thrift_defs.IDL_DIR
    names = {p.name for p in idl_dir.iterdir() if p.name.endswith(".thrift")}
    assert names == {"StarrocksExternalService.thrift", "starscan_plan.thrift"}
    assert names == {p.name for p in (REPO / "idl").glob("*.thrift")}
    assert idl_dir == importlib.resources.files("starscan.idl")
    for name in names:
        text = (idl_dir / name).read_text(encoding="utf-8")
        assert "struct" in text
    assert "TStarrocksExternalService" in (idl_dir / "StarrocksExternalService.thrift").read_text(encoding="utf-8")
    # Loaded from there: the wire service and the plan structs.
    for method in ("open_scanner", "get_next", "close_scanner"):
        assert method in thrift_defs.wire.TStarrocksExternalService.thrift_services
    assert thrift_defs.plan.TSignedPlan and thrift_defs.plan.TScanPlan


def test_pyproject_ships_the_folders_and_idl():
    """A wheel built from pyproject.toml holds every folder under `starscan` and the .thrift files."""
    meta = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    st = meta["tool"]["setuptools"]
    assert st["package-dir"] == FOLDERS
    assert set(st["packages"]) == set(FOLDERS) | KERNEL_PACKAGES
    assert "gc" not in st["packages"]
    patterns = st["package-data"]["starscan.idl"]
    assert any(Path(name).match(p) for p in patterns for name in ("StarrocksExternalService.thrift",))
    assert meta["project"]["scripts"]["starscan"] == "starscan.app.cli:main"
    # Every folder is a package (has __init__.py), so setuptools picks up its modules.
    for folder in FOLDERS.values():
        assert (REPO / folder / "__init__.py").is_file()


def test_the_kernels_folders_are_its_layers():
    """Every module of the kernel lives in a sub-package, every sub-package is a layer of
    import-linter's layers contract over the whole package (exhaustive: a folder it does not
    name fails the checks, so no module list is kept by hand), with the three sides (planner/,
    provider/, gc/, installed into the package) side by side and independent between the
    wiring and the kernel, and every layer but the wiring is type-checked strictly."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")
    assert layers["containers"] == ["starscan"] and layers["exhaustive"] is True
    named = {f"starscan.{name.strip()}" for layer in layers["layers"] for name in layer.split("|")}
    sides = {"starscan.planner", "starscan.provider", "starscan.gc"}
    assert "planner | provider | gc" in [layer.strip() for layer in layers["layers"]], "the sides are independent"
    assert named - sides - {"starscan.__main__"} == KERNEL_PACKAGES | {"starscan.idl"}, \
        "a folder of starscan/ is a layer: name it in the layers contract"
    loose = sorted(p.name for p in (REPO / "starscan").glob("*.py"))
    assert loose == ["__init__.py", "__main__.py"], "a kernel module belongs in the sub-package of its layer"
    strict = next(o for o in config["tool"]["mypy"]["overrides"] if o.get("disallow_untyped_defs"))
    for package in KERNEL_PACKAGES - {"starscan.app"}:
        assert f"{package}.*" in strict["module"], f"check {package} strictly"


def test_test_file_names_are_unique_across_the_tiers():
    """pytest imports test files by their base name (the folders are not packages)."""
    names = [p.name for p in (REPO / "tests").rglob("test_*.py")]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_the_tests_never_import_the_benchmarks():
    """The benchmarks import the tests' support package (bench/common.py puts tests/ on the
    path); the other way round would be a cycle: a test runs a benchmark's program, and a
    workload both share lives in tests/support/ (the soaks)."""
    bench_modules = {p.stem for p in (REPO / "bench").glob("*.py")}
    offenders = []
    for path in (REPO / "tests").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            offenders += [f"{path.relative_to(REPO)}:{node.lineno} imports {n}" for n in names
                          if n.split(".")[0] in bench_modules | {"bench"}]
    assert offenders == []


#: Files that name the repository's files: the docs, the benchmarks' README and the sources'
#: comments and docstrings (the dated notes and the run records name files as they were).
_NAMING = ["README.md", "docs/*.md", "bench/README.md", "*.sh", ".ci/run", "pyproject.toml",
           "starscan/**/*.py", "planner/**/*.py", "provider/**/*.py", "gc/**/*.py", "tests/**/*.py", "bench/*.py"]
_RELATIVE_PATH = re.compile(r"(?<![\w.])((?:\.\./)+[\w.-]*)")
_REPO_PATH = re.compile(r"(?<![\w./-])((?:starscan|planner|provider|gc|tests|bench|idl|docs)/[\w/.-]*\w\.(?:py|md|thrift|sh|json|toml))\b")


def _naming_files() -> list[Path]:
    return sorted({p for pattern in _NAMING for p in REPO.glob(pattern) if p.is_file() and ".venv" not in p.parts})


def test_every_repository_file_the_docs_and_comments_name_exists():
    """A file renamed or split (the client module became a package) leaves no doc or
    comment naming the old path."""
    stale = [f"{path.relative_to(REPO)}:{n}: {match}" for path in _naming_files()
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             for match in _REPO_PATH.findall(line)
             if not (REPO / match).exists() and not (path.parent / match).exists()]
    assert stale == []


def test_nothing_points_outside_the_repository():
    """The repository stands alone: no relative path in a doc, script or source leads out of
    it or to a folder it does not have (a reader has only the repository; what the docs need
    is said in docs/). The tests' own ``../`` names (paths a server must refuse) only may not
    lead out."""
    def stray(path: Path, match: str) -> bool:
        target = (path.parent / match).resolve()
        if not target.is_relative_to(REPO):
            return True
        return path.relative_to(REPO).parts[0] != "tests" and not target.exists()

    outside = [f"{path.relative_to(REPO)}:{n}: {match}" for path in _naming_files()
               for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
               for match in _RELATIVE_PATH.findall(line) if stray(path, match)]
    assert outside == []

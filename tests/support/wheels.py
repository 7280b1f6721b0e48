"""starscan's wheel, built from this checkout, in a fresh virtual environment."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".venv", "build", "dist", "__pycache__", ".pytest_cache", ".hypothesis", "starscan-warehouse",
             "spark-warehouse", "metastore_db", ".git", "docs"}


def build_wheel(work: Path) -> Path:
    """The wheel of a copy of the checkout (only what a build needs), built into ``work``."""
    src = work / "src"
    shutil.copytree(ROOT, src, ignore=lambda d, names: [n for n in names if n in SKIP_DIRS or n.endswith(".egg-info")])
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work / "wheels"), str(src)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    wheels = list((work / "wheels").glob("starscan-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def venv_with(work: Path, wheel: Path) -> tuple[Path, Path]:
    """A new virtual environment under ``work`` with ``wheel`` installed and nothing else:
    (its python, its site-packages folder)."""
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    installed = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    return py, Path(site)

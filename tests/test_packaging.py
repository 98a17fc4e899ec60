"""The built wheel holds the whole package: every tracked module of tfopt/, and nothing else.

An editable install imports from the checkout, so a package folder the wheel leaves out (one
without ``__init__.py`` under ``packages = find:``) works in every other test and is broken for
anyone who installs the wheel. ``scripts/wheel_smoke.sh`` runs the installed wheel itself.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def tracked_package_modules() -> set[str]:
    if (REPO / ".git").exists():
        listed = subprocess.run(["git", "ls-files", "tfopt"], cwd=REPO, capture_output=True,
                                text=True, check=True).stdout.split()
    else:  # an unpacked source archive: the files on disk are the package
        listed = [str(p.relative_to(REPO)) for p in (REPO / "tfopt").rglob("*.py")]
    return {name for name in listed if name.endswith(".py")}


@pytest.fixture(scope="module")
def wheel_modules(tmp_path_factory) -> set[str]:
    out = tmp_path_factory.mktemp("wheel")
    # built from a copy: setuptools reuses a checkout's build/ folder, whose stale files would
    # fill the gaps this test looks for
    source = out / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "demo-data", "bench-data"))
    # no build isolation: the test extra brings setuptools and wheel, so no download here
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "-w", str(out), str(source)],
                   check=True, capture_output=True, text=True)
    (wheel,) = out.glob("tfopt-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return {name for name in archive.namelist() if name.endswith(".py")}


def test_the_wheel_holds_every_tracked_module_of_the_package(wheel_modules):
    tracked = tracked_package_modules()
    assert len(tracked) > 50  # the listing itself worked
    assert sorted(tracked - wheel_modules) == []
    assert sorted(wheel_modules - tracked) == []


def test_every_package_folder_is_a_regular_package():
    # the cause of the class of bug: find_packages() skips a folder without __init__.py
    folders = {path.parent for path in (REPO / "tfopt").rglob("*.py")}
    assert sorted(str(f.relative_to(REPO)) for f in folders
                  if not (f / "__init__.py").exists()) == []

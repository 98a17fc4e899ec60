"""Every package folder is a regular package, so that the wheel holds the whole package.

An editable install imports from the checkout, so a package folder the wheel leaves out (one
without ``__init__.py`` under ``packages = find:``) works in every other test and is broken for
anyone who installs the wheel. ``scripts/wheel_smoke.sh`` (run by ``.ci/run``) builds the wheel
once, checks that it holds every tracked module of tfopt/ and nothing else, and runs the
installed copy.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_a_regular_package():
    # the cause of the class of bug: find_packages() skips a folder without __init__.py
    folders = {path.parent for path in (REPO / "tfopt").rglob("*.py")}
    assert sorted(str(f.relative_to(REPO)) for f in folders
                  if not (f / "__init__.py").exists()) == []

"""The rules of docs/architecture.md, enforced: which layer may import which, where TensorFlow may
be imported at module import, and that no library module imports the CLI.

Imports are read from the source (``ast``), so a rule breaks here before it breaks a user; the
TensorFlow rule is checked by importing each module in a fresh interpreter.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tfopt"

# Layer of a module: the longest matching prefix of its dotted name. Order in the table is the
# architecture page's, from the bottom up.
LAYERS = {
    "tfopt.errors": "foundation",
    "tfopt._": "foundation",  # tfopt._validate, tfopt._files, tfopt._supervisor, ...
    "tfopt.rules": "rules",
    "tfopt.gpu": "gpu",
    "tfopt.records": "records",
    "tfopt.distribute": "distribute",
    "tfopt.data": "data",
    "tfopt.analysis": "analysis",
    "tfopt.train": "train",
    "tfopt.models": "models",
    "tfopt.tune": "tune",
    "tfopt.run": "run",
    "tfopt.bench": "bench",
    "tfopt.cli": "cli",
    "tfopt.__main__": "cli",
    "tfopt": "api",  # tfopt/__init__.py: names only, resolved lazily
}

# What each layer may import (itself always). The CLI and the flat API may import everything.
ALLOWED = {
    "foundation": set(),
    "rules": {"foundation"},
    "gpu": {"foundation"},
    "records": {"foundation", "rules"},
    "distribute": {"foundation"},
    "data": {"foundation", "rules", "records", "distribute"},
    "analysis": {"foundation", "rules", "records"},
    "models": {"foundation"},
    "train": {"foundation", "rules", "gpu", "data", "distribute", "models"},
    "tune": {"foundation", "rules", "gpu", "data", "models", "train"},
    "run": {"foundation", "rules", "records", "distribute", "data", "train", "tune"},
    "bench": {"foundation", "rules", "gpu", "records", "distribute", "data", "analysis", "models",
              "train", "tune", "run"},
    "cli": {"foundation", "rules", "gpu", "records", "distribute", "data", "analysis", "models",
            "train", "tune", "run", "bench"},
    "api": {"foundation"},
}

# Packages and modules that import no TensorFlow (nor Keras) when they are imported: they run
# where TensorFlow is absent or must start fast (tfopt --help, monitor, doctor, launch).
TENSORFLOW_FREE = ["tfopt.rules", "tfopt.run.config", "tfopt.run.plan", "tfopt.records", "tfopt.gpu", "tfopt.cli", "tfopt.distribute.cluster",
                   "tfopt.distribute.launch", "tfopt._supervisor", "tfopt.data.config",
                   "tfopt.data.plan", "tfopt.data.choices", "tfopt.data.service",
                   "tfopt.tune.search", "tfopt.models", "tfopt.analysis.report",
                   "tfopt.analysis.advice", "tfopt.analysis.analyze",
                   "tfopt.analysis.plot", "tfopt.analysis.optimize"]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(name: str) -> str:
    for prefix in sorted(LAYERS, key=len, reverse=True):
        if name == prefix or name.startswith(prefix + ".") or (
                prefix.endswith("_") and name.startswith(prefix)):
            return LAYERS[prefix]
    raise AssertionError(f"{name}: no layer in LAYERS; add it there and to docs/architecture.md")


def tfopt_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every tfopt import in ``path``, relative ones resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else module_name(path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            found.append((node.lineno, base))
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(
                node.func, "id", None)) == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return [(line, name) for line, name in found if name == "tfopt" or name.startswith("tfopt.")]


LIBRARY_FILES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer():
    for path in LIBRARY_FILES:
        layer_of(module_name(path))


def test_each_layer_imports_only_the_layers_below_it():
    broken = []
    for path in LIBRARY_FILES:
        own = layer_of(module_name(path))
        for line, name in tfopt_imports(path):
            other = layer_of(name)
            if other != own and other not in ALLOWED[own] and own not in ("cli",):
                broken.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({own}) imports "
                              f"{name} ({other})")
    assert broken == []


def test_no_library_module_imports_the_cli():
    broken = [f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}"
              for path in LIBRARY_FILES if layer_of(module_name(path)) != "cli"
              for line, name in tfopt_imports(path)
              if name == "tfopt.cli" or name.startswith("tfopt.cli.")]
    assert broken == []


def modules_of(target: str) -> list[str]:
    path = PACKAGE.parent / target.replace(".", "/")
    if path.is_dir():
        return sorted(module_name(p) for p in path.rglob("*.py"))
    return [target]


@pytest.mark.parametrize("target", TENSORFLOW_FREE)
def test_package_imports_no_tensorflow_at_module_import(target):
    modules = modules_of(target)
    assert modules, target
    # each module in a fresh interpreter: one module's import must not hide another's
    code = ("import importlib, sys\n"
            "importlib.import_module(sys.argv[1])\n"
            "heavy = {'tensorflow', 'keras'} & set(sys.modules)\n"
            "if heavy:\n"
            "    print(sys.argv[1], 'imports', ', '.join(sorted(heavy)))\n")
    offenders = []
    for name in modules:
        out = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True,
                             check=True).stdout.strip()
        if out:
            offenders.append(out)
    assert offenders == []

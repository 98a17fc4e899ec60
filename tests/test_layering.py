"""The rules of docs/architecture.md, enforced: which layer may import which, where TensorFlow may
be imported at module import, that no library module imports the CLI, that no module imports
itself back through others, and that private Keras and TensorFlow names stay in the door
(``tfopt/_internals``).

Imports are read from the source (``ast``), so a rule breaks here before it breaks a user; the
TensorFlow rule is checked by importing each module in a fresh interpreter.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
import textwrap
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
    "tfopt.profile": "profile",
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
    "run": {"foundation", "rules", "gpu", "records", "distribute", "data", "train", "tune"},
    "profile": {"foundation", "rules", "gpu", "data", "analysis", "models", "train", "tune"},
    "bench": {"foundation", "rules", "gpu", "records", "distribute", "data", "analysis", "models",
              "train", "tune", "run"},
    "cli": {"foundation", "rules", "gpu", "records", "distribute", "data", "analysis", "models",
            "train", "tune", "run", "profile", "bench"},
    "api": {"foundation"},
}

# Packages and modules that import no TensorFlow (nor Keras) when they are imported: they run
# where TensorFlow is absent or must start fast (tfopt --help, monitor, doctor, launch).
TENSORFLOW_FREE = ["tfopt.rules", "tfopt.run.config", "tfopt.run.plan", "tfopt.records", "tfopt.gpu", "tfopt.cli", "tfopt.distribute.cluster",
                   "tfopt.distribute.launch", "tfopt._supervisor", "tfopt._spawn",
                   "tfopt._limits", "tfopt.data.config",
                   "tfopt.data.plan", "tfopt.data.plan_types", "tfopt.data.plan_notes",
                   "tfopt.data.sizes", "tfopt.data.choices", "tfopt.data.service",
                   "tfopt.tune.search", "tfopt.models", "tfopt.analysis.report",
                   "tfopt.analysis.advice", "tfopt.analysis.analyze",
                   "tfopt.analysis.plot", "tfopt.analysis.optimize",
                   "tfopt.analysis.findings", "tfopt.analysis.formatting"]


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


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The tfopt modules ``path`` imports, at module level or inside a function: ``import a.b``
    names ``a.b``; ``from a import b`` names ``a.b`` where that is a module, else ``a`` (a
    package, which is its ``__init__``). Relative imports resolved as in :func:`tfopt_imports`."""
    tree = ast.parse(path.read_text(), str(path))
    from_lines = {node.lineno: node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    found = set()
    for line, name in tfopt_imports(path):
        node = from_lines.get(line)
        if node is None:  # import a.b, or importlib.import_module("a.b")
            found.add(name)
        else:
            found.update(f"{name}.{alias.name}" if f"{name}.{alias.name}" in modules else name
                         for alias in node.names)
    return (found & modules) - {module_name(path)}


def test_no_module_imports_itself_back_through_others():
    # a circle of imports works only in the order the modules happen to be imported, and
    # ties modules that should stand apart: none among tfopt's modules, whether an import
    # runs at module import or inside a function
    modules = {module_name(path): path for path in LIBRARY_FILES}
    graph = {name: sorted(imported_modules(path, set(modules))) for name, path in modules.items()}
    cycles, done = [], set()

    def visit(name, trail):
        if name in trail:
            cycle = trail[trail.index(name):] + [name]
            start = cycle.index(min(cycle[:-1]))  # one spelling of each circle
            cycles.append(" -> ".join(cycle[start:-1] + cycle[:start + 1]))
            return
        if name in done:
            return
        for other in graph[name]:
            visit(other, [*trail, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert not cycles, "import circles: " + "; ".join(sorted(set(cycles)))


# -- no private Keras or TensorFlow name outside tfopt/_internals (architecture.md) ----------

DOOR = PACKAGE / "_internals"

# Private names of other libraries, each used once and for a reason (never Keras's or
# TensorFlow's): file -> {attribute: why}.
OTHER_LIBRARIES = {
    "tfopt/_spawn.py": {"_Popen": "multiprocessing's spawn context: the main module hidden"},
    "tfopt/records/convert/pool.py": {
        "_processes": "concurrent.futures: the pool's pids",
        "_executor_manager_thread": "concurrent.futures: awaited before exit (a 3.11 race)"},
    "tfopt/records/demo_data.py": {"_processes": "concurrent.futures: the pool's pids"},
    "tfopt/gpu/testing.py": {"_classes": "pynvml's error classes, in the fake NVML"},
}
PRIVATE_MODULES = ("keras.src", "tensorflow.python")


def outside_the_door():
    return [path for path in LIBRARY_FILES if DOOR not in path.parents]


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def names_defined_in(tree: ast.AST) -> set[str]:
    """Private names this file defines itself: its functions, classes, attributes it sets."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            found.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tfopt"):
            found.update(alias.asname or alias.name for alias in node.names)
    return {name for name in found if is_private(name)}


def foreign_private_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    own = names_defined_in(tree)
    allowed = OTHER_LIBRARIES.get(path.relative_to(PACKAGE.parent).as_posix(), {})
    found = []
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls", "os"):
                continue  # the class's own state (checked below for Keras subclasses); os._exit
            name = node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and is_private(node.args[1].value)):
            name = node.args[1].value
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""])
            found += [f"{path.name}:{node.lineno} imports {module}" for module in modules
                      if module.startswith(PRIVATE_MODULES)]
        if name is not None and name not in own and name not in allowed:
            found.append(f"{path.name}:{node.lineno} touches {name}")
    return found


def test_no_private_keras_or_tensorflow_name_outside_the_door():
    found = [use for path in outside_the_door() for use in foreign_private_uses(path)]
    assert found == [], "use tfopt._internals (and list the name in its INTERNALS): " + "; ".join(found)


def test_the_scan_finds_what_it_is_for(tmp_path):
    sample = PACKAGE / "sample_for_the_scan.py"
    code = ("from keras.src.saving import saving_lib\n"
            "def f(model):\n"
            "    model._initial_epoch = 3\n"
            "    return getattr(model, '_keras_history', None), model._flatten_layers()\n")
    try:
        sample.write_text(code)
        uses = foreign_private_uses(sample)
    finally:
        sample.unlink()
    # an attribute the file sets itself is its own; the rest are Keras's
    assert uses == ["sample_for_the_scan.py:1 imports keras.src.saving",
                    "sample_for_the_scan.py:4 touches _keras_history",
                    "sample_for_the_scan.py:4 touches _flatten_layers"]


def keras_subclasses():
    """(class, tfopt file) of every tfopt class with a Keras or TensorFlow base."""
    found = []
    for path in outside_the_door():
        text = path.read_text()
        if not re.search(r"class \w+\((keras|tf)\.", text):
            continue
        module = importlib.import_module(
            ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and any(
                    base.__module__.split(".")[0] in ("keras", "tensorflow")
                    for base in cls.__mro__[1:]):
                found.append((cls, path))
    return found


def bases_private_names_used(cls) -> list[str]:
    """The private names ``cls`` uses (``self._x``, its own ``_x`` methods) that its Keras or
    TensorFlow bases define or use."""
    bases = [base for base in cls.__mro__[1:]
             if base.__module__.split(".")[0] in ("keras", "tensorflow")]
    sources = []
    for base in bases:
        try:
            sources.append(inspect.getsource(base))
        except (OSError, TypeError):
            pass
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    names = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
             and isinstance(node.value, ast.Name) and node.value.id == "self"
             and is_private(node.attr)}
    names |= {name for name in vars(cls) if is_private(name)}
    return [name for name in sorted(names)
            if any(hasattr(base, name) for base in bases)
            or any(re.search(rf"self\.{re.escape(name)}\b", source) for source in sources)]


def test_the_subclass_scan_finds_what_it_is_for(tf):
    import keras

    class Restore(keras.callbacks.BackupAndRestore):
        def _save_model(self):
            self._own = self._current_epoch

    assert bases_private_names_used(Restore) == ["_current_epoch", "_save_model"]


def test_keras_subclasses_own_their_private_state(tf):
    """A tfopt subclass of a Keras or TensorFlow class neither overrides a private method of
    its bases nor reads or writes a private attribute their code uses."""
    classes = keras_subclasses()
    assert len(classes) >= 5  # callbacks, layers, schedules: a scan that finds none is broken
    broken = [f"{path.name}: {cls.__name__}.{name} is its Keras base's"
              for cls, path in classes for name in bases_private_names_used(cls)]
    assert broken == []

"""Every fenced code block of README.md and docs/*.md runs, is checked, or is marked a fragment,
so that a change of the API or the command line cannot leave a page behind.

The convention (docs/architecture.md, "Tests"), by the fence's language:

- ``python``: runs as a script (a real process) in a folder of its own holding ``photos/`` (a
  small image folder) and ``shards/`` (it converted; left out where the block calls
  ``tfopt.convert`` itself), among the small inputs below. A name the block uses before it
  defines it (``model``, ``dataset``, ``build_model``, ``tfopt``...) comes from
  ``tests/docs_givens.py``, imported in the script's first line; the block keeps its page's
  line numbers, so a traceback's ``block.py`` line is the page's. It must exit 0, and without
  the TensorFlow warnings that tfopt once caused (``LEAKS``) on stderr.
- ``bash``, and the ``$ `` lines of ``console`` (the rest is output): each command is checked.
  ``tfopt ...`` is parsed by tfopt's click commands as typed (a command that does not exist,
  an unknown option or a bad value fails), and ``tfopt convert``, ``verify`` and ``inspect``
  also run, each in a fresh copy of a folder holding every input the pages name.
  ``python SCRIPT --option`` needs the script in this repository and the option in its
  source; ``pip install ".[extra]"`` needs the extra in setup.cfg; ``scripts/...`` and
  ``examples/...`` must exist; a few shell commands (``SHELL``) are taken as they are; any
  other command fails.
- ``text``: a fragment (output, a layout, a synopsis): not run.
- ``<!-- fragment -->`` on the line before the fence: the block is a fragment (pseudo-code,
  an excerpt), only compiled (python) or syntax-checked (``bash -n``).

A block in any other language, or none, fails. A failure names the page and line of the block
(``docs/run.md:9``), and of the command within it.
"""

from __future__ import annotations

import ast
import builtins
import configparser
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
LANGUAGES = ("python", "bash", "console", "text")
FRAGMENT = "<!-- fragment -->"
# TensorFlow's warnings that tfopt caused and a user could do nothing about: AutoGraph's
# "could not transform ... Please report this to the TensorFlow team" (tfopt analyze imported
# the user's file without registering it), an op attribute "not in the op definition"
LEAKS = ("Please report this to the TensorFlow team", "Unknown attributes will be ignored")
# tfopt commands that run (no TensorFlow, a second or so each); the rest are parsed only
RUN_COMMANDS = ("convert", "verify", "inspect")
# shell commands taken as they are
SHELL = ("cd", "echo", "gzip", "mkdir", "ls", "cp", "rm", "export", "source")
# a Python block that analyses or optimises measures for 10 s or more (pyproject.toml's "slow")
SLOW_CALLS = re.compile(r"\banalyze\(|\boptimize\(")
_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


@dataclass(frozen=True)
class Block:
    """A fenced code block: its page, the 1-based line of its opening fence, its language."""

    page: Path
    line: int
    info: str
    lines: tuple[str, ...]
    marked: bool  # FRAGMENT on the line before the fence

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT).as_posix()}:{self.line}"

    def at(self, index: int) -> str:
        """Where the block's line ``index`` (0-based) is."""
        return f"{self.page.relative_to(ROOT).as_posix()}:{self.line + 1 + index}"

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    @property
    def kind(self) -> str:
        """run (python), check (bash, console), fragment (text, or marked), or unknown."""
        if self.marked or self.info == "text":
            return "fragment"
        if self.info not in LANGUAGES:
            return "unknown"
        return "run" if self.info == "python" else "check"


def page_blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order."""
    lines = page.read_text().splitlines()
    found, index = [], 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        end = next((j for j in range(index + 1, len(lines))
                    if lines[j].strip().startswith(fence[0] * 3)
                    and set(lines[j].strip()) == {fence[0]}), None)
        assert end is not None, (
            f"{page.relative_to(ROOT).as_posix()}:{index + 1}: a code block is never closed")
        found.append(Block(page, index + 1, opening["info"].strip(),
                           tuple(line[indent:] for line in lines[index + 1:end]),
                           index > 0 and lines[index - 1].strip() == FRAGMENT))
        index = end + 1
    return found


BLOCKS = [block for page in PAGES for block in page_blocks(page)]


def _blocks(kind: str) -> list:
    """One test per distinct block of ``kind``: a block repeated word for word on another page
    (README.md's quick example is docs/run.md's) runs once, under its first place."""
    first = {}
    for block in BLOCKS:
        if block.kind == kind:
            first.setdefault(block.text, block)
    return [pytest.param(block, id=block.where,
                         marks=[pytest.mark.slow] if SLOW_CALLS.search(block.text) else [])
            for block in first.values()]


def _places(block: Block) -> str:
    """Where ``block`` is, with the other places it is repeated word for word."""
    return ", ".join(other.where for other in BLOCKS if other.text == block.text
                     and other.kind == block.kind)


def test_every_block_is_run_checked_or_marked_a_fragment():
    assert BLOCKS, "no code block found"
    unknown = [f"{block.where}: ```{block.info}" for block in BLOCKS if block.kind == "unknown"]
    assert not unknown, (
        "give each block one of the languages " + ", ".join(LANGUAGES) + " (text: a fragment, "
        "not run), or mark it with " + FRAGMENT + " on the line before:\n" + "\n".join(unknown))


# ---- the folder the blocks run in ---------------------------------------------------------

@pytest.fixture(scope="session")
def world(tmp_path_factory) -> Path:
    """The inputs the pages name: photos/ and its conversion shards/; demo/ and
    demo-data/images (the same images); features.npz, table.csv, table.parquet, data.h5 (a
    group "train") with labels; imagenet/train-* (TFRecord files another tool wrote)."""
    import h5py
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from docs_givens import CLASSES

    import tfopt

    root = tmp_path_factory.mktemp("docs-world")
    tfopt.make_demo_data(root / "photos", count=80, classes=CLASSES, min_size=64, max_size=96,
                         workers=1)
    tfopt.convert(root / "photos", root / "shards", val_fraction=0.1, workers=1)
    shutil.copytree(root / "photos", root / "demo")
    shutil.copytree(root / "photos", root / "demo-data" / "images")
    rng = np.random.default_rng(0)
    labels = rng.integers(0, CLASSES, 40)
    np.savez(root / "features.npz", x=rng.random((40, 4), dtype=np.float32), y=labels)
    species = np.array(["setosa", "versicolor", "virginica"])[labels % 3]
    (root / "table.csv").write_text("length,width,species\n" + "".join(
        f"{a:.3f},{b:.3f},{s}\n" for (a, b), s in zip(rng.random((40, 2)), species,
                                                       strict=True)))
    pq.write_table(pa.table({"x": rng.random(40), "y": labels}), root / "table.parquet")
    with h5py.File(root / "data.h5", "w") as h5:
        h5.create_dataset("train/x", data=rng.random((40, 4)))
        h5.create_dataset("train/y", data=labels)
    (root / "imagenet").mkdir()
    shards = sorted((root / "shards").glob("train*"))
    for index, shard in enumerate(shards):
        shutil.copyfile(shard, root / "imagenet" / f"train-{index:05d}-of-{len(shards):05d}")
    return root


def _workspace(world: Path, tmp_path: Path, leave_out: str | None = None) -> Path:
    """A fresh copy of the world, without ``leave_out`` (what the command writes)."""
    work = tmp_path / "work"
    shutil.copytree(world, work)
    if leave_out is not None and (work / leave_out).exists():
        shutil.rmtree(work / leave_out)
    return work


# ---- python: run ------------------------------------------------------------------------

class _Names(ast.NodeVisitor):
    """The names a module uses before it binds them, in order of first use."""

    def __init__(self, bound=()):
        self.bound = set(dir(builtins)) | set(bound)
        self.free: list[str] = []

    def use(self, name: str) -> None:
        if name not in self.bound and name not in self.free:
            self.free.append(name)

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load):
            self.use(node.id)
        else:
            self.bound.add(node.id)

    def visit_Assign(self, node):
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)

    def visit_AnnAssign(self, node):
        if node.value is not None:
            self.visit(node.value)
        self.visit(node.target)

    def visit_AugAssign(self, node):
        self.visit(node.value)
        if isinstance(node.target, ast.Name):
            self.use(node.target.id)
        self.visit(node.target)

    def visit_Import(self, node):
        for alias in node.names:
            self.bound.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node):
        for alias in node.names:
            self.bound.add(alias.asname or alias.name)

    def _scope(self, node, arguments, body):
        """A function's body: its arguments and the names it assigns are its own."""
        inner = {arg.arg for arg in ast.walk(arguments) if isinstance(arg, ast.arg)}
        for part in body:
            inner |= {n.id for n in ast.walk(part)
                      if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        nested = _Names(self.bound | inner)
        for part in body:
            nested.visit(part)
        for name in nested.free:
            self.use(name)

    def visit_FunctionDef(self, node):
        for part in (*node.decorator_list, *node.args.defaults, *node.args.kw_defaults):
            if part is not None:
                self.visit(part)
        self.bound.add(node.name)
        self._scope(node, node.args, node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        self._scope(node, node.args, [node.body])

    def visit_ClassDef(self, node):
        for part in (*node.decorator_list, *node.bases):
            self.visit(part)
        self.bound.add(node.name)
        self._scope(node, ast.arguments([], [], None, [], [], None, []), node.body)

    def _comprehension(self, node, results):
        targets = {n.id for generator in node.generators for n in ast.walk(generator.target)
                   if isinstance(n, ast.Name)}
        self.visit(node.generators[0].iter)
        nested = _Names(self.bound | targets)
        for generator in node.generators:
            nested.visit(generator)  # the first iter again: harmless
        for result in results:
            nested.visit(result)
        for name in nested.free:
            self.use(name)

    def visit_ListComp(self, node):
        self._comprehension(node, [node.elt])

    visit_SetComp = visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node):
        self._comprehension(node, [node.key, node.value])


def used_before_defined(code: str) -> list[str]:
    names = _Names()
    names.visit(ast.parse(code))
    return names.free


def _script(block: Block) -> str:
    """The block as a script: the givens it uses in line 1, its code at its page's lines."""
    from docs_givens import GIVEN

    free = used_before_defined(block.text)
    unknown = [name for name in free if name not in GIVEN]
    assert not unknown, (
        f"{block.where}: the block uses {', '.join(unknown)} without defining it: define it "
        "in the block, add it to tests/docs_givens.py, or mark the block " + FRAGMENT)
    prelude = (f"import sys; sys.path.insert(0, {str(TESTS)!r}); "
               f"from docs_givens import {', '.join(free)}" if free else "")
    return prelude + "\n" * block.line + block.text


@pytest.mark.parametrize("block", _blocks("run"))
def test_python_block_runs(block: Block, world, tmp_path):
    work = _workspace(world, tmp_path, "shards" if "tfopt.convert(" in block.text else None)
    (work / "block.py").write_text(_script(block))
    # TensorFlow's C++ log at its default level, as in a user's shell (tfopt's own import
    # sets 2 for this process and its children)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"}
    done = subprocess.run([sys.executable, "block.py"], cwd=work, capture_output=True,
                          text=True, env=env, timeout=300)
    output = done.stdout[-2000:] + done.stderr[-6000:]
    assert done.returncode == 0, (
        f"{_places(block)}: the block exits {done.returncode} (block.py's line numbers are "
        f"{block.where}'s):\n{output}")
    leaks = [leak for leak in LEAKS if leak in done.stderr]
    assert not leaks, f"{_places(block)}: TensorFlow warns {leaks}:\n{done.stderr[-6000:]}"


# ---- bash and console: check, and run the cheap tfopt commands ----------------------------

def shell_commands(block: Block) -> list[tuple[str, list[str]]]:
    """(where, words) of every command in the block, shell variables of the block expanded.

    Redirections are dropped, ``for NAME in ...`` lists skipped, the commands of a loop's
    body and of ``&&``, ``||``, ``;`` and ``|`` checked each."""
    lines = list(block.lines)
    if block.info == "console":  # commands are the "$ " lines, the rest is output
        lines = [line[2:] if line.startswith("$ ") else "" for line in lines]
    found, variables, index = [], {}, 0
    while index < len(lines):
        where, text = block.at(index), lines[index]
        while text.endswith("\\") and index + 1 < len(lines):
            index += 1
            text = text[:-1] + " " + lines[index]
        index += 1
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        segment: list[str] = []
        for token in [*lexer, ";"]:
            if token and set(token) <= set(";&|"):
                words = [re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m[1], m[0]), word)
                         for word in segment]
                segment = []
                while words and words[0] in ("do", "then", "else"):
                    words = words[1:]
                if not words or words[0] in ("done", "fi", "for"):
                    continue
                assignment = re.fullmatch(r"([A-Za-z_]\w*)=(.*)", words[0])
                if assignment and len(words) == 1:
                    variables[assignment[1]] = assignment[2]
                    continue
                found.append((where, words))
            elif segment and set(segment[-1]) <= set("<>"):
                segment.pop()  # a redirection and its target
            else:
                segment.append(token)
    return found


def parse_tfopt(arguments: list[str]) -> tuple[click.Command, click.Context] | None:
    """The command ``tfopt ARGUMENTS`` runs and its parsed context, or None for --help;
    click.UsageError (or BadParameter) where the arguments do not parse."""
    from tfopt.cli import cli

    try:
        context = cli.make_context("tfopt", list(arguments))
        command = cli
        while isinstance(command, click.Group):
            rest = [*getattr(context, "_protected_args", []), *context.args]
            if not rest:
                raise click.UsageError("no command given", context)
            name, command, rest = command.resolve_command(context, rest)
            context = command.make_context(name, rest, parent=context)
    except click.exceptions.Exit as stop:  # --help
        assert stop.exit_code == 0, stop
        return None
    if context.args:
        raise click.UsageError(f"unexpected arguments {context.args}", context)
    return command, context


def check_python_command(where: str, words: list[str]) -> None:
    """``python SCRIPT [--option ...]``: the script is this repository's, the options are in
    its source."""
    script = next((word for word in words[1:] if not word.startswith("-")), None)
    assert script and (ROOT / script).is_file(), f"{where}: no script {script!r} here"
    source = (ROOT / script).read_text()
    missing = [word.split("=")[0] for word in words[2:] if word.startswith("--")
               and f'"{word.split("=")[0]}"' not in source]
    assert not missing, f"{where}: {script} has no option {', '.join(missing)}"


def check_pip_command(where: str, words: list[str]) -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    extras = set(config["options.extras_require"])
    for word in words[2:]:
        if word.startswith("-"):
            continue
        target = re.fullmatch(r"\.(?:\[([\w,]+)\])?", word)
        assert target, f"{where}: pip installs {word!r}, not this repository ('.')"
        unknown = set((target[1] or "").split(",")) - extras - {""}
        assert not unknown, f"{where}: setup.cfg has no extra {sorted(unknown)}"


def check_command(where: str, words: list[str]) -> list[str] | None:
    """Check one command; the tfopt arguments to run, where it is one that runs."""
    program = words[0]
    if program == "tfopt":
        try:
            parsed = parse_tfopt(words[1:])
        except click.ClickException as error:
            raise AssertionError(
                f"{where}: {shlex.join(words)}: {error.format_message()}") from None
        if parsed is None:
            return None
        command, context = parsed
        if command.name == "launch" and context.params["command"]:
            check_command(where, list(context.params["command"]))
        return words[1:] if command.name in RUN_COMMANDS else None
    if program in ("python", "python3"):
        check_python_command(where, words)
    elif program == "pip":
        check_pip_command(where, words)
    elif program.startswith(("scripts/", "examples/")):
        assert (ROOT / program).is_file(), f"{where}: no {program} here"
        assert os.access(ROOT / program, os.X_OK), f"{where}: {program} is not executable"
    else:
        assert program in SHELL, (
            f"{where}: {program!r} is neither tfopt, python, pip, a script of this repository "
            "nor one of the shell commands tests/test_docs.py knows (SHELL): teach it the "
            "command, or mark the block " + FRAGMENT)
    return None


@pytest.mark.parametrize("block", _blocks("check"))
def test_shell_block_commands_exist_and_the_cheap_ones_run(block: Block, world, tmp_path,
                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)  # a --plot FILE's folder is checked: the command's own
    commands = shell_commands(block)
    assert commands, f"{block.where}: no command in a {block.info} block"
    for number, (where, words) in enumerate(commands):
        arguments = check_command(where, words)
        if arguments is None:
            continue
        _, context = parse_tfopt(arguments)
        work = _workspace(world, tmp_path / str(number), context.params.get("dst"))
        done = subprocess.run([sys.executable, "-m", "tfopt", *arguments], cwd=work,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (
            f"{where}: {shlex.join(words)} exits {done.returncode}:\n"
            f"{done.stdout[-2000:]}{done.stderr[-3000:]}")


# ---- fragments: compiled or syntax-checked ------------------------------------------------

def test_marked_fragments_are_valid_in_their_language():
    for block in BLOCKS:
        if block.kind != "fragment" or block.info == "text":
            continue
        if block.info == "python":
            try:
                compile(block.text, block.where, "exec")
            except SyntaxError as error:
                raise AssertionError(f"{block.at(error.lineno - 1)}: {error.msg}") from None
        elif block.info == "bash":
            done = subprocess.run(["bash", "-n"], input=block.text, capture_output=True,
                                  text=True, timeout=60)
            assert done.returncode == 0, f"{block.where}: {done.stderr}"

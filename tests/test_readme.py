"""The README stays a newcomer's page: short, install and code early, and true to the code.

Its Run example is the one ``examples/train_image_classifier.py`` runs, its links lead to pages
that exist, its command table names the commands ``tfopt --help`` lists, and the ``tfopt.NAME``
it and the docs pages mention resolve, and the Python it asks for is setup.cfg's. Its code blocks
run in tests/test_docs.py, whose parser this file shares.
"""

from __future__ import annotations

import configparser
import importlib.util
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import tfopt
from tests.test_docs import page_blocks

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
EXAMPLE = ROOT / "examples" / "train_image_classifier.py"
MAX_LINES = 250


def readme_lines() -> list[str]:
    return README.read_text().splitlines()


def code_blocks(language: str) -> list[tuple[int, list[str]]]:
    """(index of the opening fence, the block's lines) of every README block in ``language``."""
    return [(block.line - 1, list(block.lines)) for block in page_blocks(README)
            if block.info == language]


def test_the_readme_is_at_most_250_lines():
    assert len(readme_lines()) <= MAX_LINES, (
        f"README.md has {len(readme_lines())} lines; move details to docs/ (at most {MAX_LINES})")


def test_a_pip_install_line_within_the_first_40_lines():
    assert any(line.lstrip().startswith("pip install") for line in readme_lines()[:40])


def test_a_python_block_starts_within_the_first_80_lines():
    blocks = code_blocks("python")
    assert blocks and blocks[0][0] < 80, blocks[:1]


def run_example_lines() -> list[str]:
    """The README's lines from ``run = tfopt.Run(`` through ``history = run.fit(``."""
    for _, block in code_blocks("python"):
        starts = [i for i, line in enumerate(block) if line.startswith("run = tfopt.Run(")]
        if starts:
            ends = [i for i, line in enumerate(block)
                    if i > starts[0] and line.startswith("history = run.fit(")]
            assert ends, "the README's Run block has no 'history = run.fit(' line"
            return block[starts[0]:ends[0] + 1]
    raise AssertionError("the README has no python block with 'run = tfopt.Run('")


def test_the_run_example_is_the_one_the_example_script_runs():
    wanted = run_example_lines()
    have = EXAMPLE.read_text().splitlines()
    for start, line in enumerate(have):
        indent = line[:len(line) - len(line.lstrip())]
        window = have[start:start + len(wanted)]
        if len(window) == len(wanted) and all(
                got == indent + want if want else not got.strip()
                for got, want in zip(window, wanted, strict=True)):
            return
    raise AssertionError(
        f"{EXAMPLE.relative_to(ROOT)} should hold the README's Run lines verbatim and in one "
        "piece (at one indentation):\n" + "\n".join(wanted))


def test_every_docs_link_points_to_an_existing_page():
    links = re.findall(r"\((docs/[^)#\s]+\.md)(?:#[^)]*)?\)", README.read_text())
    links += re.findall(r"`(docs/[\w./-]+\.md)`", README.read_text())
    assert links, "the README links no docs page"
    missing = sorted({link for link in links if not (ROOT / link).is_file()})
    assert not missing, missing


def test_every_docs_page_is_linked_from_the_readme():
    text = README.read_text()
    unlinked = [page.name for page in sorted((ROOT / "docs").glob("*.md"))
                if f"docs/{page.name}" not in text]
    assert not unlinked, unlinked


@cache
def commands(*group: str) -> frozenset[str]:
    """The commands ``tfopt [GROUP] --help`` lists (empty for a command that is no group)."""
    out = subprocess.run([sys.executable, "-m", "tfopt", *group, "--help"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    names, listing = set(), False
    for line in out.stdout.splitlines():
        if line.strip() == "Commands:":
            listing = True
        elif listing and line.startswith("  ") and line.strip():
            names.add(line.split()[0])
        elif listing and line.strip():
            listing = False
    return frozenset(names)


def cli_table_rows() -> list[list[str]]:
    """The words after ``tfopt`` of each command in the README's command table."""
    lines = readme_lines()
    start = next(i for i, line in enumerate(lines) if line.startswith("## The command line"))
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        found = re.match(r"\| `tfopt ([^`]+)` \|", line)
        if found:
            rows.append(found.group(1).split())
    return rows


def test_every_command_in_the_cli_table_exists():
    rows = cli_table_rows()
    assert rows, "no command table under '## The command line'"
    top = commands()
    for words in rows:
        assert words[0] in top, (words, sorted(top))
        sub = commands(words[0])
        if sub:  # a group: the table names its commands
            named = words[1].replace("\\|", "|").split("|") if len(words) > 1 else []
            assert named and set(named) <= sub, (words, sorted(sub))


def test_the_cli_table_has_every_command():
    named = {words[0] for words in cli_table_rows()}
    assert commands() <= named, sorted(commands() - named)
    for group in named:
        sub = commands(group)
        listed = {w for words in cli_table_rows() if words[0] == group and len(words) > 1
                  for w in words[1].replace("\\|", "|").split("|")}
        assert sub <= listed, (group, sorted(sub - listed))


def test_every_tfopt_name_in_the_readme_and_docs_resolves():
    # tfopt.NAME is in the flat API or is a module of the package; no TensorFlow is imported
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    stale = {}
    for page in pages:
        for name in set(re.findall(r"(?<![\w/.])tfopt\.([A-Za-z_]\w*)", page.read_text())):
            if name not in tfopt.__all__ and importlib.util.find_spec(f"tfopt.{name}") is None:
                stale.setdefault(page.relative_to(ROOT).as_posix(), []).append(name)
    assert not stale, stale


def test_the_python_it_asks_for_is_setup_cfgs():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    floor = re.fullmatch(r">=\s*(3\.\d+)", config["options"]["python_requires"].strip())
    assert floor, config["options"]["python_requires"]
    version = floor[1]
    text = README.read_text()
    assert f"Python {version}+" in text, f"the README should ask for Python {version}+"
    assert not set(re.findall(r"Python (3\.\d+)", text)) - {version}, re.findall(
        r"Python 3\.\d+\+?", text)
    venv = (ROOT / "scripts" / "_venv.sh").read_text()
    assert f"({version}+" in venv, f"scripts/_venv.sh should say {version}+"
    minor = version.split(".")[1]
    assert f"sys.version_info < (3, {minor})" in venv, "scripts/_venv.sh checks another floor"

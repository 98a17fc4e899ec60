"""Comments, docstrings and messages in tfopt/ say why, not what one machine measured once.

A figure measured on one machine (a speed-up, a time, a share of a run) goes stale as soon as
TensorFlow, the machine or the code changes, and nothing re-checks it where it sits in the code.
Such figures live in docs/benchmarks.md, beside the command that reproduces them ("Figures behind
design choices in the code"); the code keeps the reason the figure supports.

The scan reads every ``tfopt/**/*.py``: comments (``tokenize``; consecutive comment lines read
as one passage) and every string literal (``ast``: docstrings, messages, ``describe()`` and
``notes`` text, CLI help; an f-string's literal parts). Within one sentence it looks for a
measured quantity -- a ratio (``1.7x``, ``3 times faster``), a time (``ms``, ``us``, ``s``), a
share (``%``), a rate (``examples/s``, ``MB/s``), a size (``MB``, ``GiB``) or a count of runs
(``44 of 123 runs``) -- together with the context of a measurement: where or when it was taken
(``here``, ``today``, ``on this machine``, ``2 cores``, ``TensorFlow 2.21``), that it was taken
(``measured``, ``took``, ``ran at``, ``cost 15 ms``, ``a pass in 71 ms``, ``70 us a row``,
``121 against 80 ms``, ``faster than``, ``in one run``) or that it is a reading rather than a
setting (``~5 ms``, ``about 3 s``). A number alone is a definition or a rule (``keep 90 % of the
largest batch that fit``, ``8-100 % of the area``), and so is a bound (``below 95 % of the
original``, ``the Profiler's < 5 % class``, ``at most 1 MiB``): those pass.

There is no allowlist: reword the sentence to give the reason, and move the figure to
docs/benchmarks.md. A line that must keep a measurement-shaped figure (rare: prefer rewording)
carries ``# why-not-a-measurement: <the reason>`` on that line.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path
from typing import NamedTuple

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tfopt"

_NUMBER = r"(?<![\w.])\d+(?:[.,]\d+)*(?:\s?[-–]\s?\d+(?:[.,]\d+)*)?"
# A measured quantity: the number and its unit. "0x1f" (hex) and "2x2" (a shape) are no ratio.
QUANTITY = re.compile(
    _NUMBER + r"\s?(?:"
    r"(?:x|×)(?![\w.]|\.\d)"                                        # ratio: 1.7x, 2-4x
    r"|times\s+(?:faster|slower|more|less|fewer|larger|smaller|costlier|cheaper)\b"
    r"|(?:ms|µs|us|ns|s|sec|secs|seconds?|(?:milli|micro|nano)seconds?|min|minutes?|h|hours?)"
    r"\b(?!/)"  # time
    r"|%"                                                            # share
    r"|(?:[KMG]i?B|B)/s\b|(?:ex|examples|elements|records|rec|images|steps|batches)/s\b"  # rate
    r"|[KMGT]i?B\b"                                                  # size
    r")"
    r"|(?<![\w.])\d+\s+of\s+[\d,]+\s+(?:runs|trials|passes|epochs)\b",  # 44 of 123 runs
    re.IGNORECASE)

# What makes a quantity a reading from one machine rather than a definition or a rule.
LAB_CONTEXT = re.compile(
    r"\bhere\b|\btoday\b|\bthis (?:machine|host|computer|laptop|VM)\b"
    r"|\b(?:\d+|one|two|four|eight)[-\s]+(?:busy\s+|idle\s+|physical\s+)?(?:CPU\s+)?cores?\b"
    # (2 cores, 2-core, 2 busy cores)
    r"|\b(?:TensorFlow|TF|Keras)\s+\d+\.\d+"                            # TensorFlow 2.21 (here)
    r"|\bmeasured\b|\bonce\s+(?:made|read|measured|took|ran)\b|\btook\b|\bran\s+(?:at|in|for)\b"
    r"|\bagainst\s+(?:[\w']+\s+){0,2}~?\d|\bvs\.?\s+~?\d|\bbeats?\b|\boutran\b"
    r"|\bof\s+(?:kernel|CPU|wall|user|system)[- ]?(?:clock\s+)?time\b"
    r"|\b(?:faster|slower|costlier|cheaper|quicker)\s+than\b"
    r"|\b(?:in|of)\s+(?:one|a|\d+)\s+(?:runs?|trials?)\b|\bat\s+the\s+time\b"
    r"|\b(?:costs?|takes?|took|lasts?|in)\s+(?:about\s+|~|only\s+)?\d[\d.,]*\s?"  # cost 15 ms
    r"(?:ms|µs|us|ns|s|seconds?|(?:milli|micro|nano)seconds?|%)(?!\w)"
    r"|\d\s?(?:ms|µs|us|ns|(?:milli|micro|nano)seconds?)\s+(?:a|an|per|each)\s+\w",  # 70 us a row
    re.IGNORECASE)
# A bound is a rule: "below 95 % of the original", "within 3 % of the fastest", "at most 1 MiB".
THRESHOLD = re.compile(r"(?:\b(?:below|above|within|under|over|than|at\s+least|at\s+most|up\s+to)"
                       r"|[<>≤≥]=?)\s*$", re.IGNORECASE)
APPROXIMATE = re.compile(r"(?:~|\babout\s+|\baround\s+|\broughly\s+|\bsome\s+)$", re.IGNORECASE)

ESCAPE_MARK = "why-not-a-measurement:"
ESCAPE = re.compile(r"#\s*" + ESCAPE_MARK + r"\s*(\S.*)?$")

# A sentence ends at ". " before a capital, a quote or a bracket, or at a blank line.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'`(])|\n\s*\n")


def measurement_spans(text: str) -> list[tuple[int, str]]:
    """(offset of the quantity, the sentence) for each sentence of ``text`` that reads as a
    figure measured once on one machine."""
    found, start = [], 0
    for end in [m.start() for m in _SENTENCE_END.finditer(text)] + [len(text)]:
        sentence = text[start:end]
        quantities = [quantity for quantity in QUANTITY.finditer(sentence)
                      if not THRESHOLD.search(sentence[:quantity.start()])]
        if quantities:
            context = LAB_CONTEXT.search(sentence)
            approximate = next((q for q in quantities
                                if APPROXIMATE.search(sentence[:q.start()])), None)
            if context or approximate:
                quantity = approximate or quantities[0]
                found.append((start + quantity.start(), " ".join(sentence.split())))
        start = end
    return found


class Hit(NamedTuple):
    path: str
    line: int
    text: str

    def __str__(self):
        return f"{self.path}:{self.line}: {self.text}"


def _comment_passages(source: str):
    """(text, first line) of each run of comments: a comment, and the full-line comments on the
    lines right after it."""
    lines = source.splitlines()
    passage, first, last = [], 0, 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        row = token.start[0]
        full_line = not lines[row - 1][:token.start[1]].strip()
        text = token.string.lstrip("#").split(ESCAPE_MARK)[0].strip()  # not the escape's reason
        if passage and row == last + 1 and full_line:
            passage.append(text)
        else:
            if passage:
                yield "\n".join(passage), first
            passage, first = [text], row
        last = row
    if passage:
        yield "\n".join(passage), first


def _string_passages(tree: ast.AST):
    """(text, first line, last line) of each string literal; an f-string's literal parts joined
    around ``{}``. Implicitly concatenated pieces are one string, as the user reads them."""
    parts_of_fstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(value.value if isinstance(value, ast.Constant) else "{}"
                           for value in node.values)
            parts_of_fstrings.update(id(value) for value in node.values)
            yield text, node.lineno, node.end_lineno
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in parts_of_fstrings):
            yield node.value, node.lineno, node.end_lineno


def _line_of(lines: list[str], first: int, last: int, needle: str) -> int:
    """The line in ``first..last`` that holds ``needle``'s first words (where the quantity is)."""
    words = needle.split()[:2]
    for row in range(first, last + 1):
        if all(word in lines[row - 1] for word in words):
            return row
    return first


def _escaped(lines: list[str], row: int) -> bool:
    match = ESCAPE.search(lines[row - 1])
    if match and not match.group(1):
        raise AssertionError(f"line {row}: '# why-not-a-measurement:' needs its reason")
    return bool(match)


def scan_source(source: str, path: str = "<string>") -> list[Hit]:
    """Every measurement-shaped sentence in one module's comments and string literals."""
    lines = source.splitlines()
    hits = []
    for text, first in _comment_passages(source):
        for offset, sentence in measurement_spans(text):
            row = first + text.count("\n", 0, offset)
            if not _escaped(lines, row):
                hits.append(Hit(path, row, sentence))
    for text, first, last in _string_passages(ast.parse(source)):
        for offset, sentence in measurement_spans(text):
            quantity = QUANTITY.search(text, offset).group(0)
            row = _line_of(lines, first, last, quantity)
            if not _escaped(lines, row):
                hits.append(Hit(path, row, sentence))
    return sorted(set(hits), key=lambda hit: hit.line)


# -- the scanner, proved on small texts --------------------------------------------------------

@pytest.mark.parametrize("text", [
    "With it on, TensorFlow 2.21 here (2 cores) ran a decode-bound pipeline on one core, a "
    "whole pass at half the rate, in 44 of 123 runs.",
    "TensorFlow's fused kernel (tfopt.fuse_batch_norm): 1.7x a CNN step here",
    "use (1.7x a CNN step on 2 CPU cores)",
    "the extra copy and hand-off of every 150-KB image cost 6-8 % of the examples/s here",
    "121 against 80 ms a pass of 3,200 320-px records",
    "a float64 scalar: struct packs it ~10x faster than NumPy",
    "fresh Gaussian noise per image costs ~5 ms",
    "measured: 4.2 s to exit without this, 1.4 s with 0.5 s grace",
    "the pipeline ran at 605 examples/s without one and 615 with one",
    "a cache read 3 times slower today",
    "about 20 MB on a CPU, whatever the batch",
    "the lookups took ~20 % of it",
    "an import costs 14 ms on this machine",
    "where tf.debugging.Assert (stateful) cost 15 ms of that pass and of its first record.",
    "a scan per shard read a pass of 16 small shards in 71 ms, this in 48 ms",
    "(12 bytes read per record, about 2.5 microseconds a record)",
    "at 0.1-0.4 us a pixel, a few seconds, about what importing TensorFlow costs.",
    "On this project's 2-core CPU that is 35 % of a training step of the small ResNet",
    "slows as the range fills (18 s of kernel time to reach a 20000-file limit)",
    "if a prefix of 1,536 pairs reads 9,500 elements/s in 3 of 10 runs",
])
def test_the_scanner_flags_a_figure_measured_once(text):
    assert measurement_spans(text), text
    assert scan_source(f"x = 1  # {text}\n"), "as a comment"
    assert scan_source(f'"""{text}"""\n'), "as a docstring"
    assert scan_source(f'message = f"{{x}}: {text}"\n'), "as an f-string"


@pytest.mark.parametrize("text", [
    "keep 90 % of the largest batch that fit: steps vary in memory use",
    "Random-resized crop as in Inception/ResNet training: 8-100 % of the area, aspect 3/4-4/3.",
    "the TF Profiler's < 5 % / 5-20 % classes: fine, moderately, highly input-bound",
    "a smaller steps_per_execution within 3 % of the fastest is preferred",
    "1 ms between resident-memory samples during a CPU trial step",
    "1 MiB reads keep hashing at disk speed without holding whole shards",
    "antialias: without it, downscaling by 2x or more aliases fine textures",
    "stops with \"Unsupported JPEG process: SOF type 0x..\" on such files",
    "refuse it here, where Popen itself would have raised",
    "Hex SHA-256 of a file, read in 1 MiB chunks.",
    "Memory a cache or shuffle buffer may use, e.g. 2GB or 512MiB",
    "the central 87.5 % square, as for evaluation",
    "Protobuf refuses a message of 2 GiB or more",
    "(model: up to 2x for a training step that takes as long as the input)",
    "a rewrite that measures below 95% of the original is not kept",
    "pieces of at most 1 MiB, checked against the bytes left (say 2**36 in a 1 KB file)",
    "From the second epoch, a start of at least 0.5 s and 5 % of the epoch is logged.",
    "TensorFlow (2.21) holds the release until its sleep ends; the sleeps double from 10 ms",
    "The peak resident memory of this process while a block runs (sampled every 1 ms).",
    "a positive int of bytes, e.g. 134217728 (128 MiB)",
    "marker 0xff{marker:02x} at byte {position}",
    "map num_parallel_calls=2 (one per core); cache decoded, estimate 1 MiB",
])
def test_the_scanner_passes_definitions_and_rules(text):
    assert not measurement_spans(text), text
    assert not scan_source(f"x = 1  # {text}\n")
    assert not scan_source(f'"""{text}"""\n')


def test_a_figure_is_judged_within_its_sentence_and_found_on_its_line():
    source = ("# The shuffle keeps 90 % of the batch. It is refused here, before a trial.\n"
              "x = 1  # a comment over two lines: the decode\n"
              "# took 0.31 ms a crop.\n"
              'y = ("a message that "\n'
              '     "ran at 600 examples/s")\n')
    assert [(hit.line, hit.text) for hit in scan_source(source, "m.py")] == [
        (3, "a comment over two lines: the decode took 0.31 ms a crop."),
        (5, "a message that ran at 600 examples/s"),
    ]


def test_the_escape_needs_a_reason():
    assert not scan_source("x = 1  # took 3 s  # why-not-a-measurement: the spec says so\n")
    with pytest.raises(AssertionError, match="needs its reason"):
        scan_source("x = 1  # took 3 s  # why-not-a-measurement:\n")


# -- the rule, on tfopt/ -----------------------------------------------------------------------

def test_no_figure_measured_once_in_tfopt():
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        hits += scan_source(path.read_text(encoding="utf-8"),
                            str(path.relative_to(PACKAGE.parent)))
    assert not hits, (
        "measured figures in code (give the reason instead, and move the figure with the "
        "command that reproduces it to docs/benchmarks.md, 'Figures behind design choices in "
        "the code'):\n" + "\n".join(map(str, hits)))

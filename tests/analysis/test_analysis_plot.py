"""The analysis chart (``PipelineReport.plot``, ``tfopt analyze --plot``): bars, lines and the
format by suffix, on reports built from hand-made stages; one real run through the CLI."""

from __future__ import annotations

import math
import sys
import textwrap
import xml.etree.ElementTree as ElementTree

import pytest
from click.testing import CliRunner

from tfopt.analysis import advice
from tfopt.analysis.plot import stage_rates
from tfopt.analysis.report import PipelineReport, Stage
from tfopt.errors import InvalidArgumentError

SVG = "{http://www.w3.org/2000/svg}"


def stage(index, op, self_time, name=None, parallelism=None, runtime=None, python=False,
          per_output=1.0):
    return Stage(index=index, op=op, name=name, parallelism=parallelism,
                 runtime_parallelism=runtime, self_time_s=self_time, per_core_rate=None,
                 prefix_rate=None, elements_per_output=per_output, bytes_per_element=None,
                 random=False, python=python)


def report_of(stages, cores, measured) -> PipelineReport:
    plan = advice.allocation(stages, cores)
    return PipelineReport(stages=tuple(stages), bottleneck=plan.bottleneck,
                          ceiling_per_s=plan.ceiling_per_s, rate_per_s=measured,
                          predicted_per_s=plan.predicted_per_s, cores=cores,
                          recommendations=(), autotune_model=True)


@pytest.fixture
def report():
    # per batch of 32: the source 16 ms (62.5/s), the map 128 ms on 2 workers (15.6/s), the
    # batch 0.1 ms (10,000/s); the prefetch's cost is unknown
    return report_of([
        stage(0, "TFRecordDataset", 0.0005, per_output=32),
        stage(1, "ParallelMapDatasetV2", 0.004, name="decode", parallelism=-1, runtime=2,
              per_output=32),
        stage(2, "BatchDatasetV2", 0.0001),
        stage(3, "PrefetchDataset", None),
    ], cores=4, measured=14.0)


def bars(root):
    return [rect for rect in root.iter(f"{SVG}rect") if "bar" in rect.get("class", "").split()]


def bar_end(rect) -> float:
    return float(rect.get("x")) + float(rect.get("width"))


def line_x(root, name) -> float:
    (line,) = [line for line in root.iter(f"{SVG}line") if line.get("class") == name]
    assert line.get("x1") == line.get("x2")  # vertical
    return float(line.get("x1"))


def test_one_bar_per_stage_with_a_bound_source_at_the_top(report, tmp_path):
    assert report.bottleneck == "decode"
    path = report.plot(tmp_path / "pipeline.svg")
    assert path == tmp_path / "pipeline.svg"
    root = ElementTree.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    drawn = bars(root)
    assert [rect.get("data-stage") for rect in drawn] == ["TFRecord#0", "decode", "batch#2"]
    assert [float(rect.get("y")) for rect in drawn] == sorted(float(r.get("y")) for r in drawn)
    (highlighted,) = [rect for rect in drawn if "bottleneck" in rect.get("class").split()]
    assert highlighted.get("data-stage") == "decode"
    assert len({rect.get("fill") for rect in drawn}) == 2  # the bottleneck's colour differs
    texts = [element.text for element in root.iter(f"{SVG}text")]
    assert {"TFRecord#0", "decode", "batch#2", "prefetch#3"} <= set(texts)
    (no_bar,) = [t for t in root.iter(f"{SVG}text") if t.get("class") == "no-bar"]
    assert no_bar.text == "-"
    assert any("bottleneck decode" in text for text in texts)  # the title
    assert any("log scale" in text for text in texts)  # the axis says so
    # longer bars for faster stages, on one log axis
    ends = {rect.get("data-stage"): bar_end(rect) for rect in drawn}
    assert ends["decode"] < ends["TFRecord#0"] < ends["batch#2"]


def test_ceiling_and_measured_lines_on_the_bars_log_axis(report, tmp_path):
    root = ElementTree.parse(report.plot(tmp_path / "pipeline.svg")).getroot()
    ends = {rect.get("data-stage"): bar_end(rect) for rect in bars(root)}
    rates = dict(stage_rates(report))
    assert rates["decode"] == pytest.approx(2 / 0.128) and rates["prefetch#3"] is None

    def position(value):  # where value falls between the decode and batch bars' ends
        low, high = math.log10(rates["decode"]), math.log10(rates["batch#2"])
        share = (math.log10(value) - low) / (high - low)
        return ends["decode"] + share * (ends["batch#2"] - ends["decode"])

    assert position(rates["TFRecord#0"]) == pytest.approx(ends["TFRecord#0"], abs=0.05)
    assert line_x(root, "ceiling") == pytest.approx(position(report.ceiling_per_s), abs=0.05)
    assert line_x(root, "measured") == pytest.approx(position(14.0), abs=0.05)
    assert ends["decode"] < line_x(root, "ceiling")  # 4 / sum(cost) = 27.8/s
    assert line_x(root, "measured") < ends["decode"]


def test_a_sequential_bottleneck_is_the_ceiling(tmp_path):
    # a Python map runs one element at a time whatever it asks for: its bound is the ceiling
    report = report_of([stage(0, "RangeDataset", 1e-5),
                        stage(1, "ParallelMapDatasetV2", 0.01, parallelism=-1, python=True)],
                       cores=2, measured=90.0)
    assert report.ceiling_per_s == pytest.approx(100)
    root = ElementTree.parse(report.plot(tmp_path / "python.svg")).getroot()
    (bar,) = [rect for rect in bars(root) if rect.get("data-stage") == "parallelMap#1"]
    assert "bottleneck" in bar.get("class")
    assert line_x(root, "ceiling") == pytest.approx(bar_end(bar), abs=0.02)
    assert line_x(root, "measured") < line_x(root, "ceiling")


def test_no_known_cost_no_bars(tmp_path):
    report = report_of([stage(0, "RangeDataset", None), stage(1, "MapDataset", None)],
                       cores=2, measured=500.0)
    assert report.ceiling_per_s is None and report.bottleneck is None
    root = ElementTree.parse(report.plot(tmp_path / "unknown.svg")).getroot()
    assert bars(root) == []
    assert len([t for t in root.iter(f"{SVG}text") if t.get("class") == "no-bar"]) == 2
    assert [line.get("class") for line in root.iter(f"{SVG}line") if line.get("class")] == [
        "measured"]
    assert any("no bottleneck" in (t.text or "") for t in root.iter(f"{SVG}text"))


def test_written_atomically_and_escaped(report, tmp_path):
    path = tmp_path / "pipeline.svg"
    path.write_text("an older chart")
    report.plot(path, title="a <title> & more")
    root = ElementTree.parse(path).getroot()  # replaced whole: it parses
    assert "a <title> & more" in [t.text for t in root.iter(f"{SVG}text")]
    assert [p.name for p in tmp_path.iterdir()] == ["pipeline.svg"]  # no temporary file left


def test_png_and_the_suffix_decides(report, tmp_path):
    pytest.importorskip("matplotlib")
    png = report.plot(tmp_path / "pipeline.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    upper = report.plot(tmp_path / "pipeline.SVG")
    assert ElementTree.parse(upper).getroot().tag == f"{SVG}svg"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipeline.SVG", "pipeline.png"]


def test_a_png_without_matplotlib_says_how_to_get_it(report, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # importing it fails
    with pytest.raises(InvalidArgumentError, match=r"--plot .*pipeline\.png.*tfopt\[plot\]"):
        report.plot(tmp_path / "pipeline.png")
    assert list(tmp_path.iterdir()) == []


def test_another_suffix_names_the_path(report, tmp_path):
    path = tmp_path / "pipeline.pdf"
    with pytest.raises(InvalidArgumentError, match=r"pipeline\.pdf.*\.svg or \.png"):
        report.plot(path)
    assert list(tmp_path.iterdir()) == []


def test_a_report_without_stages_is_refused(tmp_path):
    with pytest.raises(InvalidArgumentError, match="no stages"):
        report_of([], cores=2, measured=1.0).plot(tmp_path / "empty.svg")
    assert list(tmp_path.iterdir()) == []


PIPELINE = textwrap.dedent('''
    import tensorflow as tf

    def pipeline():
        return (tf.data.Dataset.range(10**6).map(lambda x: x * 2, name="double").batch(32)
                .prefetch(2))
''')


def run(*args):
    from tfopt.cli import cli

    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_cli_refuses_a_bad_plot_before_measuring(tmp_path):
    # the file does not exist either: refusing --plot first (exit 2) shows nothing else ran
    result = run("analyze", f"{tmp_path}/missing.py:pipeline", "--plot", tmp_path / "chart.txt")
    assert result.exit_code == 2, result.output
    assert "--plot" in result.stderr and "chart.txt" in result.stderr
    result = run("analyze", f"{tmp_path}/missing.py:pipeline", "--plot",
                 tmp_path / "no-such-folder" / "chart.svg")
    assert result.exit_code == 2 and "does not exist" in result.stderr


def test_cli_writes_the_plot(tmp_path):
    source = tmp_path / "pipeline.py"
    source.write_text(PIPELINE)
    chart = tmp_path / "chart.svg"
    result = run("analyze", f"{source}:pipeline", "--seconds", "0.5", "--cores", "2",
                 "--plot", chart)
    assert result.exit_code == 0, result.output
    assert f"plot written to {chart}" in result.stderr
    assert "bottleneck:" in result.stdout
    root = ElementTree.parse(chart).getroot()
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "double" in texts
    assert [line.get("class") for line in root.iter(f"{SVG}line")
            if line.get("class") == "measured"] == ["measured"]

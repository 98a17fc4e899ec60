"""The sweep chart: well-formed SVG, PNG through matplotlib, the writer chosen by suffix."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

import pytest

from tfopt.errors import InvalidArgumentError

SVG = "{http://www.w3.org/2000/svg}"


def test_sweep_svg_is_well_formed(tmp_path):
    from tfopt.bench.plot import sweep_svg, write_sweep_svg

    sweep = {32: 210.5, 64: 250.0, 128: 240.25}
    path = write_sweep_svg(tmp_path / "sweep.svg", sweep, "a <title> & more")
    root = ElementTree.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    assert len(root.findall(f"{SVG}circle")) == 3
    (line,) = root.findall(f"{SVG}polyline")
    points = [tuple(map(float, point.split(","))) for point in line.get("points").split()]
    assert [x for x, _ in points] == sorted(x for x, _ in points)  # batch sizes left to right
    assert min(points, key=lambda p: p[1]) == points[1]  # the fastest is drawn highest
    texts = [element.text for element in root.iter(f"{SVG}text")]
    assert "a <title> & more" in texts and {"32", "64", "128"} <= set(texts)
    assert not list(tmp_path.glob(".*"))  # no temporary file left
    one = ElementTree.fromstring(sweep_svg({64: 100.0}))
    assert len(one.findall(f"{SVG}circle")) == 1
    with pytest.raises(InvalidArgumentError, match="empty"):
        sweep_svg({})


def test_sweep_png_and_suffix_dispatch(tmp_path):
    pytest.importorskip("matplotlib")
    from tfopt.bench.plot import write_sweep_plot

    sweep = {32: 251.0, 64: 249.0, 128: 239.0}
    png = write_sweep_plot(tmp_path / "sweep.png", sweep, "title")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = write_sweep_plot(tmp_path / "sweep.svg", sweep)
    assert svg.read_text().lstrip().startswith("<")
    with pytest.raises(InvalidArgumentError, match=r"\.svg or \.png"):
        write_sweep_plot(tmp_path / "sweep.pdf", sweep)

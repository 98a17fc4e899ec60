"""What an analysis finds, one item at a time: each :class:`Stage` of the pipeline, with what
was read and measured of it, and each :class:`Recommendation`. A
:class:`~tfopt.analysis.report.PipelineReport` gathers them, :mod:`tfopt.analysis.advice` judges
the stages and writes the recommendations, :mod:`tfopt.analysis.plot` draws the stages. No
TensorFlow.

Rates are elements per second. A stage's own rates (``per_core_rate``, ``prefix_rate``) count
its own elements (before a ``batch``: examples; after it: batches).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    """One stage of the pipeline, source first."""

    index: int
    op: str  # the graph's op, e.g. "ParallelMapDatasetV2"
    name: str | None  # the user's name=, None where none was given
    parallelism: int | None  # what the graph asks for: -1 AUTOTUNE, None sequential
    runtime_parallelism: int | None  # what runs: AUTOTUNE's choice, or a rewrite's (model)
    self_time_s: float | None  # own processing time per own element (model, wall clock)
    per_core_rate: float | None  # own elements per second of one core (1 / self time)
    prefix_rate: float | None  # measured elements/s of the pipeline cut after this stage
    elements_per_output: float  # own elements per output element (a batch of 8: 8 below it)
    bytes_per_element: float | None
    random: bool  # shuffles, or its function draws random numbers
    python: bool  # its function runs Python (py_function, numpy_function, from_generator)
    heavy_ops: tuple[str, ...] = ()  # e.g. ("DecodeJpeg",)
    fused: bool = False  # TensorFlow runs it inside the next stage (map + batch)
    cardinality: int | None = None  # elements of the prefix ending here: -1 infinite, None unknown
    batch_size: int | None = None  # batch stages: elements in per element out
    buffer_size: int | None = None  # shuffles: the buffer's elements
    deterministic: bool | None = None  # parallel stages: yields in order (None: not parallel)
    item_bytes: int | None = None  # the smallest itemsize among its output's numeric tensors
    image_side: int | None = None  # the longer static side of an image tensor in its output
    # decoding stages: the mean (height, width) of the stored images it decodes, read from the
    # headers of a few of its input elements (encoded images, or paths of image files)
    stored_size: tuple[int, int] | None = None

    @property
    def label(self) -> str:
        """The user's name, else a short op name with the stage's index (``map#2``)."""
        if self.name:
            return self.name
        op = self.op.replace("Dataset", "")
        op = op[:-2] if op[-2:-1] == "V" and op[-1].isdigit() else op
        if op[1:2].islower():  # MapDataset -> map#2; TFRecordDataset -> TFRecord#0
            op = op[:1].lower() + op[1:]
        return f"{op}#{self.index}"

    @property
    def cost_s(self) -> float:
        """CPU seconds this stage spends per output element (0 where unknown)."""
        if self.self_time_s is None:
            return 0.0
        return self.self_time_s * self.elements_per_output


@dataclass(frozen=True)
class Recommendation:
    kind: str  # "parallelize", "prefetch", ...
    stage: str  # the stage's label
    expected_speedup: float  # the model's output rate after / before
    message: str  # a sentence a user can act on

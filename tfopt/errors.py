"""The errors tfopt raises on purpose.

Every error a user can cause derives from :class:`TfoptError`; the CLI turns it into a one-line
message and exit code 1 in one place (``tfopt.cli``). Messages name the argument, file or key,
show the value received and what was expected.
"""

from __future__ import annotations


class TfoptError(Exception):
    """Base class of all errors tfopt raises for bad input or a bad environment."""


class InvalidArgumentError(TfoptError, ValueError):
    """An argument has a value outside what is allowed."""


class SourceError(TfoptError):
    """Raw input data (an image, an array file, a CSV row) cannot be used.

    Attributes:
        path: The offending file.
        detail: What is wrong with it, including the row or key where known.
    """

    def __init__(self, path, detail: str):
        self.path = str(path)
        self.detail = detail
        super().__init__(f"{self.path}: {detail}")

    def __reduce__(self):
        # raised in worker processes and pickled back to the parent: rebuild from both fields
        return type(self), (self.path, self.detail)


class DatasetError(TfoptError):
    """A dataset folder or TFRecord file is missing, incomplete or inconsistent."""


class NoManifestError(DatasetError):
    """A folder holds no ``manifest.json``: TFRecord files written by another tool, or a
    conversion interrupted before it wrote its manifest (``interrupted``: its journal is there).

    Source resolution catches this type (never the message) to read the folder as foreign
    TFRecord files; everything else that needs a tfopt dataset lets it through as the
    DatasetError it is.

    Attributes:
        folder: The folder.
        interrupted: True when a conversion's journal is in the folder.
    """

    def __init__(self, folder, interrupted: bool, message: str):
        self.folder = str(folder)
        self.interrupted = interrupted
        super().__init__(message)

    def __reduce__(self):
        return type(self), (self.folder, self.interrupted, str(self))


class MissingSplitError(DatasetError):
    """A dataset has no split of the name asked for: given as ``split=``, or ``"validation"``,
    which an evaluation pipeline reads when no split is given.

    Catch this, not :class:`DatasetError`, to fall back to another split: a DatasetError may
    also be an unreadable shard or an incomplete dataset.

    Attributes:
        path: The dataset folder.
        split: The split asked for.
        available: The splits the dataset has.
    """

    def __init__(self, path, split: str, available, message: str):
        self.path = str(path)
        self.split = split
        self.available = list(available)
        super().__init__(message)

    def __reduce__(self):
        return type(self), (self.path, self.split, self.available, str(self))


class OutputExistsError(TfoptError):
    """The output folder holds data and neither --overwrite nor --resume was given."""


class WorkdirBusyError(TfoptError):
    """Another run (another process) is using the workdir; the message names it."""


class DiskFullError(TfoptError):
    """The output's file system is full, or too full for the conversion to fit."""


class WorkerStartError(TfoptError):
    """Worker processes cannot be started here (the message says why and what to do)."""


class GpuUnavailableError(TfoptError):
    """NVML or an NVIDIA GPU is not available (the reason is in the message)."""


class UnsupportedDatasetError(TfoptError):
    """A ``tf.data`` pipeline ``tfopt.analyze`` cannot read or rebuild (the op is named)."""

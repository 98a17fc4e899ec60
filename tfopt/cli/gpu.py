"""GPU commands: ``tfopt monitor`` (GPU state over time) and ``tfopt doctor`` (the stack).

Neither imports TensorFlow at module import; ``doctor`` imports it inside its TensorFlow probe,
and ``monitor`` never does.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from pathlib import Path

import click

from tfopt.cli._common import finite, json_option
from tfopt.errors import InvalidArgumentError
from tfopt.gpu.table import (
    CSV_FIELDS,
    DEFAULT_LOW_UTIL,
    format_table,
    snapshot_record,
    to_csv_row,
)

# Indirection so tests can replace the wait (e.g. to raise KeyboardInterrupt, as Ctrl-C does).
_sleep = time.sleep
_CLEAR = "\x1b[H\x1b[2J"  # cursor home + clear screen, as `watch` does


class _SampleFiles:
    """The --csv and --jsonl outputs: opened for appending, flushed and fsynced per sample."""

    def __init__(self, csv_path: Path | None, jsonl_path: Path | None):
        self._csv_file = self._jsonl_file = self._csv = None
        if csv_path is not None:
            write_header = self._check_csv_header(csv_path)
            self._csv_file = self._open("--csv", csv_path, newline="")
            self._csv = csv.writer(self._csv_file)
        if jsonl_path is not None:
            try:
                self._jsonl_file = self._open("--jsonl", jsonl_path)
            except InvalidArgumentError:
                self.close()
                raise
        if csv_path is not None and write_header:  # once both files are open
            self._csv.writerow(CSV_FIELDS)

    @staticmethod
    def _open(option: str, path: Path, **kwargs):
        # a missing folder is the usual mistake: one line naming the option, not a traceback
        try:
            return open(path, "a", encoding="utf-8", **kwargs)
        except OSError as error:
            raise InvalidArgumentError(f"{option} {path}: cannot open it for appending "
                                       f"({error.strerror}); give a file in a folder that "
                                       "exists") from None

    @staticmethod
    def _check_csv_header(path: Path) -> bool:
        """True when the file needs a header; raise if it has someone else's."""
        if not path.exists() or path.stat().st_size == 0:
            return True
        try:
            with open(path, newline="", encoding="utf-8") as file:
                first = next(csv.reader(file), [])
        except (UnicodeDecodeError, csv.Error) as error:  # not a CSV file at all
            raise InvalidArgumentError(
                f"--csv {path}: the file exists and is not a CSV file ({error}); appending "
                "would mix formats. Give a new file name."
            ) from None
        if tuple(first) != CSV_FIELDS:
            raise InvalidArgumentError(
                f"--csv {path}: the file exists with other columns ({','.join(first)[:80]}); "
                "appending would mix formats. Give a new file name."
            )
        return False

    def write(self, records: list[dict]) -> None:
        # Flush and fsync every sample: a monitor is often stopped with Ctrl-C or kill, and the
        # rows up to that moment must be on disk (one fsync per second costs nothing).
        if self._csv is not None:
            for record in records:
                self._csv.writerow(to_csv_row(record))
            self._sync(self._csv_file)
        if self._jsonl_file is not None:
            for record in records:
                self._jsonl_file.write(json.dumps(record, sort_keys=False) + "\n")
            self._sync(self._jsonl_file)

    @staticmethod
    def _sync(file) -> None:
        file.flush()
        os.fsync(file.fileno())

    def close(self) -> None:
        for file in (self._csv_file, self._jsonl_file):
            if file is not None:
                file.close()


@click.command()
@click.option("-n", "--interval", type=click.FloatRange(min=0, min_open=True), default=1.0,
              callback=finite, show_default=True, help="Seconds between samples.")
@click.option("--count", type=click.IntRange(min=1), default=None,
              help="Take this many samples, then exit. Default: until Ctrl-C.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Append one timestamped row per GPU per sample to this CSV file.")
@click.option("--jsonl", "jsonl_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Append one JSON object per GPU per sample to this file.")
@click.option("--low-util", type=click.FloatRange(0, 100), default=DEFAULT_LOW_UTIL,
              show_default=True, help="Mark GPUs whose utilisation is below this percent.")
def monitor(interval, count, csv_path, jsonl_path, low_util):
    """Show GPU utilisation, memory, power, temperature, clocks and throttling.

    Refreshes a table every -n SECONDS, like `watch -n 1 nvidia-smi`. THROTTLE marks a GPU
    whose clocks are held down by power or heat; LOW-UTIL one that waits for work (usually the
    input pipeline). Ctrl-C stops it (exit code 0). Exit code 1 when no NVIDIA GPU is usable.
    """
    from tfopt.gpu.nvml import NvmlSession  # noqa: PLC0415 - imported when a command needs it
    from tfopt.gpu.sampler import SampleSchedule  # noqa: PLC0415

    session = NvmlSession()
    files = None
    try:
        state = session.state
        state.raise_unless_ok()  # GpuUnavailableError -> one line and exit 1 (tfopt.cli)
        title = (f"driver {state.driver_version}  CUDA {state.cuda_driver_version_str or 'N/A'}"
                 f"  every {interval:g} s")
        files = _SampleFiles(csv_path, jsonl_path)
        clear = _CLEAR if sys.stdout.isatty() else ""
        schedule = SampleSchedule(interval)
        taken = 0
        try:
            while True:
                snapshots = session.snapshots()
                files.write([snapshot_record(s, low_util) for s in snapshots])
                separator = "" if taken == 0 or clear else "\n"
                click.echo(clear + separator + format_table(snapshots, low_util, title))
                taken += 1
                if count is not None and taken >= count:
                    break
                schedule.advance()
                _sleep(schedule.delay())
        except KeyboardInterrupt:
            click.echo(f"tfopt: monitor stopped after {taken} sample(s)", err=True)
    finally:
        if files is not None:
            files.close()
        session.close()


# by CheckStatus value: the doctor's modules load only when `tfopt doctor` runs
_STATUS_COLOURS = {"OK": "green", "WARN": "yellow", "FAIL": "red", "SKIP": None}


@click.command()
@json_option("Print the report as JSON on stdout.")
def doctor(as_json):
    """Check that driver, CUDA, cuDNN, TensorFlow and the hardware fit together.

    Each check is OK, WARN, FAIL or SKIP (does not apply here) with a one-line recommendation.
    Runs without TensorFlow installed, and says so. Exit code 1 when a check fails.
    """
    from tfopt.gpu.doctor import run_doctor  # noqa: PLC0415 - imported when a command needs it

    report = run_doctor()
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        width = max(len(check.name) for check in report.checks)
        for check in report.checks:
            status = click.style(f"{check.status.value:<4}", fg=_STATUS_COLOURS[check.status.value])
            click.echo(f"{status}  {check.name:<{width}}  {check.summary}")
            if check.recommendation:
                click.echo(f"{'':4}  {'':<{width}}  -> {check.recommendation}")
        counts = report.counts()
        click.echo(", ".join(f"{n} {s}" for s, n in counts.items()))
    if not report.ok:
        raise click.exceptions.Exit(1)


COMMANDS = [monitor, doctor]

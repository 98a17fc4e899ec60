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
              show_default=True,
              help="Mark GPUs whose Kernel share (GPU-Util) is below this percent.")
@json_option("Print each sample as one line of JSON on stdout instead of the table.")
def monitor(interval, count, csv_path, jsonl_path, low_util, as_json):
    """Show GPU activity, memory, power, temperature, clocks and throttling.

    Refreshes a table every -n SECONDS, like `watch -n 1 nvidia-smi`. Kernel is NVML's
    GPU-Util (what nvidia-smi shows): the share of time a kernel was running, however few SMs
    it used. On Hopper and newer GPUs the GPU's own counters (GPM) say how busy it was, over
    each interval: SMAct (share of SMs with work), SMOcc (warps resident against the most the
    SMs hold), Tensor (share of cycles in tensor-core instructions), DRAM (bandwidth against
    its peak); "n/s" where the GPU or driver has no GPM (the JSON says why). THROTTLE marks a
    GPU whose clocks are held down by power or heat; LOW-UTIL one that waits for work (usually
    the input pipeline). Ctrl-C stops it (exit code 0). Exit code 1 when no NVIDIA GPU is
    usable.
    """
    from tfopt.gpu.gpm import GpmReader  # noqa: PLC0415 - imported when a command needs it
    from tfopt.gpu.nvml import NvmlSession  # noqa: PLC0415
    from tfopt.gpu.sampler import SampleSchedule  # noqa: PLC0415

    session = NvmlSession()
    gpm = GpmReader(session)
    files = None
    try:
        state = session.state
        state.raise_unless_ok()  # GpuUnavailableError -> one line and exit 1 (tfopt.cli)
        title = (f"driver {state.driver_version}  CUDA {state.cuda_driver_version_str or 'N/A'}"
                 f"  every {interval:g} s")
        files = _SampleFiles(csv_path, jsonl_path)
        clear = _CLEAR if sys.stdout.isatty() and not as_json else ""
        schedule = SampleSchedule(interval)
        taken = 0
        try:
            if gpm.prime():  # GPM counts between two samples: the first row's interval too
                schedule.advance()
                _sleep(schedule.delay())
            while True:
                snapshots = gpm.annotate(session.snapshots())
                records = [snapshot_record(s, low_util) for s in snapshots]
                files.write(records)
                if as_json:
                    click.echo(json.dumps(_sample_json(state, records)))
                else:
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
        gpm.close()  # its sample buffers go before NVML does
        session.close()


def _sample_json(state, records: list[dict]) -> dict:
    """One sample of every GPU as monitor --json prints it: the driver's facts and the records
    (the --jsonl keys)."""
    return {"driver_version": state.driver_version,
            "cuda_driver_version": state.cuda_driver_version_str, "gpus": records}


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

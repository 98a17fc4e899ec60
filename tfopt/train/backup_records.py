"""What a backup folder holds, read and checked without Keras: the backup's records, the check
of its weights against the checksums they record, and which files are the backup's.

``latest.json``, format 3 (written last and atomically, after its weights)::

    {"format": 3, "run": "<hex>", "epoch": 7, "batch": 0, "weights": "weights-000007.weights.h5",
     "generation": 7, "sha256": "<hex>", "size": 51234, "time": 1764830000.5,
     "previous": {"epoch": 6, ..., "weights": "weights-000006.weights.h5", ...},
     "older": [{"epoch": 5, ..., "weights": "weights-000005.weights.h5", ...}]}

The newest backup, then the ``keep`` - 1 before it, newest first: ``previous`` (``null`` for the
first backup) and ``older`` (the rest). Each names its weights file with the SHA-256 and size
taken when it was written, and ``time`` (seconds since the epoch). ``run`` names the training
(the same across its restarts), so that its copies elsewhere are told from another run's.
A backup taken mid-epoch on SIGTERM adds ``steps``: the steps of epoch ``epoch`` + 1 trained by
then. A model with random layers (dropout) adds ``rng``: their seed generators' states, which
``save_weights`` leaves out. Format 2 has no ``older``, ``run`` or ``time``; format 1 (tfopt before checksums, no
``format`` key) only ``epoch``, ``batch``, ``weights`` and ``generation``: its weights are
restored unverified. Both are still read.

The files a backup may delete are those it can account for: the weights its records name, the
weights file of a save cut short after its last record (generation + 1), its own temporary
files, and the files of a plain Keras backup it restored. Any other weights file (its record
was deleted, or it was copied in) is an orphan: never restored, never deleted.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import uuid
from dataclasses import dataclass
from pathlib import Path

from tfopt._files import SmallFileError, read_small_json, sha256_file
from tfopt._validate import is_int
from tfopt.errors import TfoptError

BACKUP_INFO_FILE = "latest.json"
# the folders backup_callbacks lays out under its directory (tfopt.Run's workdir)
BACKUP_FOLDER, LONG_TERM_FOLDER = "backup", "long-term"
FORMAT = 3
_LAST_TIME = 253_402_300_799  # 9999-12-31 23:59:59 UTC: what a date can show
MAX_RECORD_BYTES = 16 << 20  # a record lists kept backups and seed states: far below this
_MAX_SEED_STATES = 100_000  # random layers in one model: a bound on what a record may list
# a file being written: never read, deleted by the next backup. Its name holds the writer's
# pid and a random part (``temp_name``): two writers never share one, even in one folder
TEMP_PREFIX = ".tmp-"
_TEMP_NAME = re.compile(rf"{re.escape(TEMP_PREFIX)}(?:\d+-[0-9a-f]{{8}}-)?(.+)")
WEIGHTS_PREFIX, WEIGHTS_SUFFIX = "weights-", ".weights.h5"
_WEIGHTS_NAME = re.compile(rf"{re.escape(WEIGHTS_PREFIX)}(\d+){re.escape(WEIGHTS_SUFFIX)}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_RUN = re.compile(r"[0-9a-f]{32}")
# hard links to committed weights that the background copy reads (deleted once copied)
COPY_PREFIX = ".copy-"
# what keras.callbacks.BackupAndRestore writes (".bkp" with double_checkpoint=True)
KERAS_WEIGHTS_FILE = "latest.weights.h5"
KERAS_INFO_FILE = "training_metadata.json"
KERAS_FILES = (KERAS_WEIGHTS_FILE, KERAS_INFO_FILE, f"{KERAS_WEIGHTS_FILE}.bkp",
               f"{KERAS_INFO_FILE}.bkp")


def temp_name(name: str) -> str:
    """A name, unique to this write, under which ``name`` is written before its rename (the
    final name last: Keras checks the suffix)."""
    return f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}-{name}"


def weights_file_name(generation: int) -> str:
    return f"{WEIGHTS_PREFIX}{generation:06d}{WEIGHTS_SUFFIX}"


class BackupRecordError(TfoptError):
    """A backup record that cannot be used: ``problem`` says what is wrong and where,
    ``hint`` what to do; the message is the two joined."""

    def __init__(self, problem: str, hint: str):
        self.problem = problem
        self.hint = hint
        super().__init__(f"{problem}. {hint}")


def start_afresh_hint(folder) -> str:
    return (f"Hint: delete {folder} to start training from scratch (the best model beside "
            "it is kept).")


@dataclass(frozen=True)
class BackupRecord:
    """One backup: its weights file (a name in the folder) and the training state it holds.

    ``epoch`` is the number of epochs finished (the epoch a resumed fit starts at), ``batch``
    the last batch seen in it, ``steps`` the steps of the next epoch already trained (0 but
    for a backup taken mid-epoch on SIGTERM: ``tfopt.Run`` resumes after them). ``sha256``
    and ``size`` are None for a backup written without them (format 1, plain Keras): such
    weights are restored unverified.
    """

    weights: str
    epoch: int
    batch: int = 0
    generation: int = 0
    sha256: str | None = None
    size: int | None = None
    time: float | None = None
    steps: int = 0
    rng: tuple[tuple[int, ...], ...] = ()  # the random layers' seed states, in layer order

    @property
    def verified(self) -> bool:
        return self.sha256 is not None

    @property
    def order(self) -> tuple:
        """Sorts backups oldest to newest: by training progress, then by when written."""
        return self.epoch, self.steps, self.batch, self.time or 0.0

    def to_json(self) -> dict:
        info = {"epoch": self.epoch, "batch": self.batch, "weights": self.weights,
                "generation": self.generation, "sha256": self.sha256, "size": self.size}
        if self.steps:
            info["steps"] = self.steps
        if self.rng:
            info["rng"] = [list(state) for state in self.rng]
        if self.time is not None:
            info["time"] = self.time
        return info


def new_run_id() -> str:
    return uuid.uuid4().hex


def latest_json(record: BackupRecord, previous: BackupRecord | None,
                older: tuple[BackupRecord, ...] = (), run: str | None = None) -> dict:
    """The contents of ``latest.json`` for ``record``, with the kept backups before it."""
    info = {"format": FORMAT, **({"run": run} if run else {}), **record.to_json(),
            "previous": previous.to_json() if previous is not None else None}
    if older:
        info["older"] = [entry.to_json() for entry in older]
    return info


@dataclass(frozen=True)
class BackupFolder:
    """A backup folder as read at the start of a fit.

    Attributes:
        path: The folder.
        info_file: The record file read (``latest.json`` or Keras's
            ``training_metadata.json``); None when the folder holds no backup.
        candidates: The backups to try, newest first (the backup, then those kept before it).
        keras: The backup is a plain Keras one.
        orphans: Weights files no record accounts for; left alone.
        interrupted: The weights file of a save cut short before its record, or None.
        next_generation: The generation of the next backup's weights, above every weights
            file in the folder, so that no save ever replaces an orphan.
        run: The training's id (format 3), or None.
    """

    path: Path
    info_file: Path | None
    candidates: tuple[BackupRecord, ...]
    keras: bool
    orphans: tuple[str, ...]
    interrupted: str | None
    next_generation: int
    run: str | None = None

    @property
    def backup_files(self) -> set[str]:
        """The files of the backup: deleted once a newer backup supersedes them."""
        names = {record.weights for record in self.candidates}
        if self.keras:
            names.update(KERAS_FILES)
        if self.interrupted is not None:
            names.add(self.interrupted)
        return names


def read_backup_folder(folder: Path, ignore_records: bool = False) -> BackupFolder:
    """Read the records of the backup in ``folder`` (which may be missing); no weights read.

    With ``ignore_records`` the folder is read as if it had no record file (every weights
    file an orphan): what a restore from another location does with a damaged record.

    Raises:
        TfoptError: a record file is unreadable, not JSON, or a key holds a value tfopt never
            writes; the message names the file, the key, the value and what was expected.
    """
    latest = folder / BACKUP_INFO_FILE
    keras_info, keras_weights = folder / KERAS_INFO_FILE, folder / KERAS_WEIGHTS_FILE
    info_file: Path | None = None
    candidates: tuple[BackupRecord, ...] = ()
    keras = False
    run = None
    if ignore_records:
        pass
    elif latest.exists():
        info_file = latest
        candidates, run = _read_latest(latest, folder)
    elif keras_info.exists() or keras_weights.exists():
        keras = True
        info_file = keras_info if keras_info.exists() else keras_weights
        candidates = (_read_keras(folder),)
    generations = {}
    if folder.is_dir():
        for path in folder.iterdir():
            match = _WEIGHTS_NAME.fullmatch(path.name)
            if match and path.is_file():
                generations[path.name] = int(match.group(1))
    named = {record.weights for record in candidates}
    top = max((record.generation for record in candidates), default=0)
    interrupted = None
    if not keras and candidates and weights_file_name(top + 1) in generations:
        interrupted = weights_file_name(top + 1)
    orphans = tuple(sorted(name for name in generations
                           if name not in named and name != interrupted))
    if not keras and info_file is not None and keras_weights.exists():
        orphans = (*orphans, KERAS_WEIGHTS_FILE)  # a Keras backup beside this one's
    next_generation = max([top, *(generations[name] for name in orphans
                                  if name in generations)]) + 1
    return BackupFolder(folder, info_file, candidates, keras, orphans, interrupted,
                        next_generation, run)


def _load_json(path: Path, folder: Path, expected: str):
    try:
        return read_small_json(path, MAX_RECORD_BYTES, within=folder)
    except FileNotFoundError as error:
        raise BackupRecordError(f"{path}: cannot be read ({error.strerror or error})",
                                start_afresh_hint(folder)) from None
    except SmallFileError as error:
        raise BackupRecordError(f"{error}; expected {expected}",
                                start_afresh_hint(folder)) from None


def _read_latest(path: Path, folder: Path) -> tuple[tuple[BackupRecord, ...], str | None]:
    expected = "the backup record tfopt writes"
    info = _load_json(path, folder, expected)
    if not isinstance(info, dict):
        raise BackupRecordError(f"{path}: holds a JSON {type(info).__name__}; expected {expected} "
                                f"(an object)", start_afresh_hint(folder))
    version = info.get("format", 1)
    if not is_int(version) or not 1 <= version <= FORMAT:
        raise BackupRecordError(f"{path}: format={version!r}: expected 1 to {FORMAT} (a later "
                                f"format is a newer tfopt's)", start_afresh_hint(folder))
    run = info.get("run")
    if run is not None and not (isinstance(run, str) and _RUN.fullmatch(run)):
        raise BackupRecordError(f"{path}: run={run!r}: expected the training's id (32 "
                                f"lowercase hex digits) or no run key", start_afresh_hint(folder))
    checked = version >= 2
    records = [parse_record(info, path, folder, checked, "")]
    previous = info.get("previous")
    older = info.get("older", [])
    if previous is None:
        if older:
            raise BackupRecordError(f"{path}: older={older!r}: expected none without a previous "
                                    f"backup", start_afresh_hint(folder))
        return tuple(records), run
    if not isinstance(previous, dict):
        raise BackupRecordError(f"{path}: previous={previous!r}: expected a backup record (an "
                                f"object) or null", start_afresh_hint(folder))
    # a format 1 backup restored, then superseded, is the first format 2 backup's fallback
    previous_checked = checked and not (previous.get("sha256") is None
                                        and previous.get("size") is None)
    records.append(parse_record(previous, path, folder, previous_checked, "previous."))
    if not isinstance(older, list) or not all(isinstance(entry, dict) for entry in older):
        raise BackupRecordError(f"{path}: older={older!r}: expected a list of backup records "
                                f"(objects)", start_afresh_hint(folder))
    for index, entry in enumerate(older):
        entry_checked = checked and not (entry.get("sha256") is None
                                         and entry.get("size") is None)
        records.append(parse_record(entry, path, folder, entry_checked, f"older[{index}]."))
    names = [record.weights for record in records]
    if len(set(names)) != len(names):
        raise BackupRecordError(f"{path}: names a weights file twice ({', '.join(names)}): "
                                f"expected each kept backup in its own file",
                                start_afresh_hint(folder))
    return tuple(records), run


def parse_record(info: dict, path, folder, checked: bool, where: str) -> BackupRecord:
    """The backup record in ``info`` (a ``latest.json`` entry or a copy's record).

    ``path`` and ``folder`` are shown in errors as given: a path, or a second location's URL.
    ``checked``: whether the record must carry the weights' SHA-256 and size (format 2 on).

    Raises:
        BackupRecordError: a key is missing or holds the wrong kind of value.
    """
    def fail(key: str, expected: str):
        shown = repr(info[key]) if key in info else "missing"
        return BackupRecordError(f"{path}: {where}{key}={shown}: expected {expected}",
                                 start_afresh_hint(folder))

    def count(key: str, default: int | None = None) -> int:
        value = info.get(key, default)
        if not is_int(value) or value < 0:
            raise fail(key, "an integer >= 0")
        return int(value)

    name = info.get("weights")
    if not isinstance(name, str) or name in ("", ".", "..") or Path(name).name != name:
        raise fail("weights", f"the name of a weights file in {folder}")
    sha256 = size = None
    if checked:
        sha256 = info.get("sha256")
        if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
            raise fail("sha256", "the weights file's SHA-256 (64 lowercase hex digits)")
        size = count("size")
    written = info.get("time")
    if written is not None and (isinstance(written, bool) or not isinstance(written, (int, float))
                                or not math.isfinite(written) or not 0 <= written <= _LAST_TIME):
        raise fail("time", "the time it was written (seconds since 1970, before the year "
                           "10000) or no time key")
    rng = info.get("rng", [])
    if not (isinstance(rng, list) and len(rng) <= _MAX_SEED_STATES
            and all(isinstance(state, list) and len(state) == 2
                    and all(is_int(part) for part in state) for state in rng)):
        raise fail("rng", "the random layers' seed states: a list of [seed, counter] pairs")
    return BackupRecord(name, count("epoch"), count("batch", 0), count("generation", 0),
                        sha256, size, None if written is None else float(written),
                        count("steps", 0), tuple(tuple(int(p) for p in s) for s in rng))


def _read_keras(folder: Path) -> BackupRecord:
    """The backup of ``keras.callbacks.BackupAndRestore``, read as Keras reads it: the epoch
    from its metadata when present (else the fit's own initial epoch)."""
    path = folder / KERAS_INFO_FILE
    if not path.exists():
        return BackupRecord(KERAS_WEIGHTS_FILE, 0)
    expected = 'Keras BackupAndRestore\'s metadata, like {"epoch": 3, "batch": 0}'
    info = _load_json(path, folder, expected)
    epoch = info.get("epoch") if isinstance(info, dict) else None
    if not is_int(epoch) or epoch < 0:
        shown = f"epoch={epoch!r}" if isinstance(info, dict) else f"a JSON {type(info).__name__}"
        raise BackupRecordError(f"{path}: {shown}: expected {expected} (epoch an integer >= 0)",
                                start_afresh_hint(folder))
    batch = info.get("batch", 0)
    return BackupRecord(KERAS_WEIGHTS_FILE, int(epoch), int(batch) if is_int(batch) else 0)


def weights_problem(folder: Path, record: BackupRecord) -> str | None:
    """What is wrong with ``record``'s weights file, in words; None when it can be loaded
    (as far as its record can tell: an unverified one only has to be there)."""
    path = folder / record.weights
    try:
        if not path.is_file():
            return "is missing"
        if not record.verified:
            return None
        size = path.stat().st_size
        if record.size is not None and size != record.size:
            return (f"has {size} bytes where {record.size} were written (truncated or "
                    "overwritten)")
        if sha256_file(path) != record.sha256:
            return "is damaged: its SHA-256 is not the one recorded when it was written"
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    return None


def temporary_files(folder: Path) -> list[Path]:
    """The backup's own files left half-written by a save cut short."""
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = _TEMP_NAME.fullmatch(path.name)
        if match and path.is_file() and (match.group(1) == BACKUP_INFO_FILE
                                         or _WEIGHTS_NAME.fullmatch(match.group(1))):
            found.append(path)
    return found


def copy_links(folder: Path) -> list[Path]:
    """The links a background copy reads from (``.copy-weights-N.weights.h5``): left behind
    only by a process that died mid-copy."""
    if not folder.is_dir():
        return []
    return [path for path in folder.iterdir()
            if path.name.startswith(COPY_PREFIX) and path.is_file()
            and _WEIGHTS_NAME.fullmatch(path.name[len(COPY_PREFIX):])]

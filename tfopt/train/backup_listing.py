"""What ``tfopt backups DIR`` shows: every backup version in the local folder, the long-term
folder and the second location, each with its state, newest first, and the one a restore
would take. Reads every weights file and hashes it; imports no TensorFlow or Keras.

The restore named is the one :class:`tfopt.train.backup.AtomicBackupAndRestore` tries first
and would keep if it loads: the newest verified (or, without a checksum, present) local backup
or copy of this unfinished training (never another's sharing the copy), the local one first
when both hold the same backup. The
long-term folder is listed but never restored from (``docs/train.md``, "Backups").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from tfopt.errors import TfoptError
from tfopt.train.backup_records import (
    BACKUP_FOLDER,
    BACKUP_INFO_FILE,
    LONG_TERM_FOLDER,
    BackupRecord,
    read_backup_folder,
    temporary_files,
    weights_problem,
)
from tfopt.train.backup_store import (
    BackupStore,
    SharedStoreError,
    StoreError,
    VersionState,
    origin_of,
)

__all__ = ["BackupEntry", "BackupListing", "Place", "list_backups", "resolve_backup_folder"]


class Place(str, enum.Enum):
    LOCAL = "local"
    LONG_TERM = "long-term"
    COPY = "copy"


@dataclass(frozen=True)
class BackupEntry:
    """One version as listed: where it is, what it holds, its state and what is wrong."""

    place: Place
    name: str
    location: str
    state: VersionState
    record: BackupRecord | None = None
    problem: str | None = None
    finished: bool = False  # a copy of a training that ended normally: never resumed
    other_training: bool = False  # a copy of another training sharing the location

    @property
    def order(self) -> tuple:
        return self.record.order if self.record is not None else (-1, -1, -1, 0.0)

    def to_json(self) -> dict:
        record = self.record
        return {"place": self.place.value, "name": self.name, "location": self.location,
                "state": self.state.value, "problem": self.problem, "finished": self.finished,
                "other_training": self.other_training,
                "epoch": None if record is None else record.epoch,
                "batch": None if record is None else record.batch,
                "time": None if record is None else record.time,
                "sha256": None if record is None else record.sha256}


@dataclass(frozen=True)
class BackupListing:
    """Every entry, newest first, and which one a restore takes (None: a fresh start)."""

    folder: Path
    copy_to: str | None
    entries: tuple[BackupEntry, ...]
    restore: BackupEntry | None
    problems: tuple[str, ...] = ()  # a place that could not be read, in words
    shared: bool = False  # the copy holds several trainings' backups: a fit stops, said why

    def to_json(self) -> dict:
        return {"folder": str(self.folder), "copy_to": self.copy_to,
                "versions": [entry.to_json() for entry in self.entries],
                "restore": None if self.restore is None else self.restore.to_json(),
                "problems": list(self.problems), "shared": self.shared}


def resolve_backup_folder(directory) -> Path:
    """The backup folder of ``directory``: ``directory/backup`` (what :func:`backup_callbacks`
    and ``tfopt.Run`` lay out), or ``directory`` itself when it holds ``latest.json``."""
    directory = Path(directory)
    if (directory / BACKUP_INFO_FILE).exists() and not (directory / BACKUP_FOLDER).is_dir():
        return directory
    return directory / BACKUP_FOLDER


def _local(folder: Path) -> tuple[list[BackupEntry], list[str], str | None]:
    try:
        state = read_backup_folder(folder)
    except TfoptError as error:  # a damaged record: its weights files are listed unnamed
        state, problems = read_backup_folder(folder, ignore_records=True), [str(error)]
    else:
        problems = []
    entries = []
    for record in state.candidates:
        problem = weights_problem(folder, record)
        if problem is not None:
            kind = VersionState.DAMAGED
        else:
            kind = VersionState.VERIFIED if record.verified else VersionState.UNCHECKED
        entries.append(BackupEntry(Place.LOCAL, record.weights, str(folder), kind, record,
                                   problem))
    unnamed = [*state.orphans, *([state.interrupted] if state.interrupted else []),
               *(path.name for path in temporary_files(folder))]
    for name in sorted(set(unnamed)):
        entries.append(BackupEntry(Place.LOCAL, name, str(folder), VersionState.PARTIAL,
                                   problem="no record names it (a save cut short, or its "
                                   "record was lost)"))
    return entries, problems, state.run


def _store(store: BackupStore, place: Place, mine: set[str] | None = None
           ) -> list[BackupEntry]:
    """``mine``: the versions a restore may take here (None: no restore reads this place)."""
    finished = store.finished_runs()
    entries = []
    for version in store.versions():
        state, problem = store.state(version)
        done = version.run is not None and version.run in finished
        other = (mine is not None and not done and version.record is not None
                 and version.name not in mine)
        entries.append(BackupEntry(place, version.name, store.location, state, version.record,
                                   problem, done, other))
    return entries


def _resumable(store: BackupStore, folder: Path, run: str | None) -> set[str]:
    """The copy's versions a restore of ``folder`` may take, as the callback chooses them."""
    taken, _ = store.resumable(run, origin_of(folder))
    return {version.name for version in taken}


def list_backups(directory, copy_to=None, argument: str = "copy_to") -> BackupListing:
    """Every backup of ``directory`` (its ``backup/`` and ``long-term/`` folders) and of
    ``copy_to``, their weights read and checked. ``argument`` is the name an error gives
    ``copy_to`` (``--copy-to`` for the CLI).

    Raises:
        TfoptError: neither ``directory`` nor ``copy_to`` exists or holds anything.
        InvalidArgumentError: ``copy_to`` is a URL fsspec cannot open here.
    """
    folder = resolve_backup_folder(directory)
    store = BackupStore(copy_to, argument) if copy_to is not None else None
    entries, problems, run = _local(folder)
    shared = False
    long_term = folder.parent / LONG_TERM_FOLDER
    places = [(BackupStore(long_term), Place.LONG_TERM)] if long_term.is_dir() else []
    if store is not None:
        places.append((store, Place.COPY))
    for place_store, place in places:
        try:
            mine = _resumable(place_store, folder, run) if place is Place.COPY else None
        except SharedStoreError as error:
            problems.append(str(error))
            mine, shared = set(), True  # nothing there is restored: the fit stops
        except StoreError:
            mine = None  # said once, below
        try:
            entries += _store(place_store, place, mine)
        except StoreError as error:
            problems.append(str(error))
    if not entries and not problems and not Path(directory).exists() and store is None:
        raise TfoptError(f"{directory}: no such folder, and no --copy-to to look in. Hint: "
                         "give the folder given to backup_callbacks or tfopt.Run's workdir")
    rank = {Place.LOCAL: 1, Place.COPY: 0, Place.LONG_TERM: -1}
    entries.sort(key=lambda e: (e.record is not None, *e.order, rank[e.place]), reverse=True)
    restore = next((e for e in entries if e.place is not Place.LONG_TERM and not e.finished
                    and not e.other_training and e.state in (VersionState.VERIFIED, VersionState.UNCHECKED)), None)
    return BackupListing(folder, store.location if store else None, tuple(entries),
                         None if shared else restore, tuple(problems), shared)

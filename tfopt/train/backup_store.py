"""A second place for backups: a folder of versions written once, on a local path or any
fsspec URL (``s3://``, ``gs://``, ...), and the background thread that copies each backup there.

A version is two files, never replaced once written::

    weights-<run>-000007-<first 12 hex of its SHA-256>.weights.h5   the weights, as in backup/
    weights-<run>-000007-<...>.json                  its record, written after the weights
                                                     were checked on arrival
    finished-<run>.json                              that training ended normally: its
                                                     versions are not resumed

``<run>`` is the first 12 hex of the training's id: several trainings may share one location,
each pruning its own versions and resuming only its own (:meth:`BackupStore.resumable`).
Versions an older tfopt wrote have no ``<run>-`` part; their record still names the run.

A version is *verified* when its record reads and the weights have the size and SHA-256 it
records, *damaged* when they do not (or the record is malformed), *partial* when the weights
have no record (a copy cut short, or one that arrived damaged). Local paths need nothing
installed; URLs need ``fsspec`` and the file system's package (``pip install 'tfopt[remote]'``
for ``s3://``). Used by :mod:`tfopt.train.backup` and ``tfopt backups`` (``docs/train.md``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import shutil
import threading
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

from tfopt._files import atomic_path, sha256_stream
from tfopt._validate import require
from tfopt.errors import InvalidArgumentError, TfoptError
from tfopt.train.backup_io import write_bytes_atomically
from tfopt.train.backup_records import (
    FORMAT,
    BackupRecord,
    BackupRecordError,
    parse_record,
    temp_name,
)

logger = logging.getLogger("tfopt")

__all__ = ["BackupCopier", "BackupStore", "SharedStoreError", "StoreError", "Version",
           "VersionState", "origin_of"]

_VERSION = re.compile(r"(weights-(?:[0-9a-f]{12}-)?(\d{6,})-([0-9a-f]{12}))\.weights\.h5")
_RECORD = re.compile(r"(weights-(?:[0-9a-f]{12}-)?\d{6,}-[0-9a-f]{12})\.json")
RUN_NAME_HEX = 12  # of a run id's 32, in a version's name: enough to tell trainings apart
_FINISHED = re.compile(r"finished-([0-9a-f]{32})\.json")


class StoreError(TfoptError):
    """The second location refused a read or a write, or a copy arrived damaged."""


class SharedStoreError(TfoptError):
    """The location holds the unfinished backups of several trainings, and nothing says which
    one is being resumed: none is taken (another training's weights never are)."""


class VersionState(str, Enum):
    VERIFIED = "verified"
    DAMAGED = "damaged"
    PARTIAL = "partial"
    UNCHECKED = "unchecked"  # a local backup recorded without a checksum (older tfopt, Keras)


@dataclass(frozen=True)
class Version:
    """One version in a store, as listed (its weights not yet read).

    ``record`` is None for a partial version or a malformed record (``problem`` then says
    which); ``problem`` is also set when the weights are missing or of another size.
    """

    location: str
    name: str
    record: BackupRecord | None
    run: str | None = None
    long_term: bool = False
    problem: str | None = None
    origin: str | None = None  # the backup folder it was copied from (absolute path)

    @property
    def partial(self) -> bool:
        return self.record is None and self.problem is None

    @property
    def where(self) -> str:
        return f"{self.location.rstrip('/')}/{self.name}"


def _is_url(location: str) -> bool:
    return "://" in location and not location.startswith("file://")


class _LocalFiles:
    """A folder on this machine: writes are atomic (temporary name, fsync, rename)."""

    def __init__(self, root: Path):
        self.root = root

    def names(self) -> dict[str, int]:
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return {}
        return {entry.name: entry.stat().st_size for entry in entries
                if entry.is_file(follow_symlinks=False)}

    def read(self, name: str) -> bytes:
        return (self.root / name).read_bytes()

    def open(self, name: str):
        return open(self.root / name, "rb")

    def put(self, name: str, source: Path) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / name
        with atomic_path(final, self.root / temp_name(name)) as tmp:
            shutil.copyfile(source, tmp)

    def write(self, name: str, data: bytes) -> None:
        write_bytes_atomically(self.root / name, data, self.root / temp_name(name))

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.root / name).unlink()


REMOTE_DEADLINE_S = 30.0  # a remote call that has not answered by then has failed
# a slow link may need longer, a test of the deadline far less: seconds, positive and finite
REMOTE_DEADLINE_VARIABLE = "TFOPT_REMOTE_DEADLINE_S"
UPLOAD_FLOOR_BYTES_S = 1 << 20  # an upload's deadline grows by a second a MiB past that


def remote_deadline() -> float:
    """Seconds a remote call may take: :data:`REMOTE_DEADLINE_S`, or the environment's
    ``TFOPT_REMOTE_DEADLINE_S``.

    Raises:
        InvalidArgumentError: The variable is set to something that is not a positive, finite
            number of seconds.
    """
    text = os.environ.get(REMOTE_DEADLINE_VARIABLE, "").strip()
    if not text:
        return REMOTE_DEADLINE_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    require(0 < seconds < math.inf, REMOTE_DEADLINE_VARIABLE, text,
            "a positive, finite number of seconds for a remote call to answer")
    return seconds


def _within(seconds: float, what: str, call, *args):
    """``call(*args)`` on a thread of its own, given up after ``seconds``: an endpoint that
    takes connections and never answers would hold the caller (the training, a listing) for
    as long as the file system's own retries last, minutes. The thread given up is left to
    end by itself (a daemon: it holds no lock of ours and does not keep the process up).

    Raises:
        TimeoutError: No answer within ``seconds``.
    """
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = call(*args)
        except BaseException as error:  # handed to the caller as it is
            outcome["error"] = error

    thread = threading.Thread(target=run, name=f"tfopt-remote-{what}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {seconds:g} s to {what}")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


class _FsspecFiles:
    """A folder behind fsspec. An object store's upload appears whole or not at all. Every
    call is given up after :func:`remote_deadline`, read once when the folder is opened (an
    upload's deadline grows with its size), so that an endpoint that never answers costs a warning, not the training."""

    def __init__(self, url: str, argument: str):
        try:
            import fsspec
        except ImportError:
            raise InvalidArgumentError(
                f"{argument}={url!r}: a URL needs fsspec and its file system's package: "
                "pip install 'tfopt[remote]' (fsspec and s3fs), or gcsfs for gs://") from None
        try:
            self.fs, self.root = fsspec.core.url_to_fs(url)
        except (ImportError, ValueError) as error:
            raise InvalidArgumentError(
                f"{argument}={url!r}: fsspec cannot open it ({error}). Hint: install the file "
                "system's package (s3fs for s3://, gcsfs for gs://)") from None
        self.root = self.root.rstrip("/")
        # read once: a bad setting named here, not later on the copying thread
        self.deadline = remote_deadline()

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def names(self) -> dict[str, int]:
        self.fs.invalidate_cache()  # s3fs caches listings: another process may have written
        try:
            entries = _within(self.deadline, "list the folder",
                              lambda: self.fs.ls(self.root, detail=True))
        except FileNotFoundError:
            return {}
        return {entry["name"].rstrip("/").rsplit("/", 1)[-1]: int(entry.get("size") or 0)
                for entry in entries if entry.get("type") == "file"}

    def read(self, name: str) -> bytes:
        return _within(self.deadline, f"read {name}", self.fs.cat_file, self._path(name))

    def open(self, name: str):
        return _within(self.deadline, f"open {name}", self.fs.open, self._path(name), "rb")

    def put(self, name: str, source: Path) -> None:
        deadline = self.deadline + source.stat().st_size / UPLOAD_FLOOR_BYTES_S
        _within(deadline, f"upload {name}", self.fs.put_file, str(source), self._path(name))

    def write(self, name: str, data: bytes) -> None:
        _within(self.deadline, f"write {name}", self.fs.pipe_file, self._path(name), data)

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            _within(self.deadline, f"remove {name}", self.fs.rm_file, self._path(name))


def origin_of(folder: Path) -> str:
    """How a version records the backup folder it was copied from, and how a restore of
    ``folder`` asks for its own: the one key both the callback and ``tfopt backups`` use."""
    return str(Path(folder).absolute())


class BackupStore:
    """The versions at one location; see the module docstring for the layout and states.

    Args:
        location: A folder path, ``file://`` URL, or any URL fsspec opens.
        argument: The name an error gives the location (``--copy-to`` for the CLI).
            Defaults to "copy_to".

    Raises:
        InvalidArgumentError: a URL fsspec cannot open here.

    Example:
        >>> BackupStore("s3://bucket/run1").versions()
    """

    def __init__(self, location, argument: str = "copy_to"):
        self.location = os.fspath(location)
        if _is_url(self.location):
            self._files = _FsspecFiles(self.location, argument)
        else:
            path = self.location.removeprefix("file://")
            self._files = _LocalFiles(Path(path))

    def __repr__(self) -> str:
        return f"BackupStore({self.location!r})"

    def _fail(self, doing: str, error: Exception) -> StoreError:
        reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
        return StoreError(f"{self.location}: cannot {doing} ({type(error).__name__}: {reason})")

    def _names(self) -> dict[str, int]:
        try:
            return self._files.names()
        except Exception as error:  # any file system's error: fsspec's backends vary
            raise self._fail("list the folder", error) from None

    def versions(self) -> list[Version]:
        """Every version, newest first (by epoch, batch, time written); partial ones last.

        Reads each record, not the weights: :meth:`check` reads them.

        Raises:
            StoreError: the folder cannot be listed.
        """
        names = self._names()
        recorded, found = [], set()
        for name in names:
            match = _RECORD.fullmatch(name)
            if match:
                weights = f"{match.group(1)}.weights.h5"
                found.add(weights)
                recorded.append(self._read_version(weights, name, names))
        partial = [Version(self.location, name, None) for name in sorted(names)
                   if _VERSION.fullmatch(name) and name not in found]
        with_record = sorted((v for v in recorded if v.record is not None),
                             key=lambda v: v.record.order, reverse=True)
        malformed = [v for v in recorded if v.record is None]
        return [*with_record, *malformed, *partial]

    def _read_version(self, weights: str, record_name: str, names: dict[str, int]) -> Version:
        where = f"{self.location.rstrip('/')}/{record_name}"
        try:
            info = json.loads(self._files.read(record_name))
        except Exception as error:  # unreadable or not JSON
            return Version(self.location, weights, None,
                           problem=f"its record {record_name} cannot be read as JSON ({error})")
        if not isinstance(info, dict):
            return Version(self.location, weights, None,
                           problem=f"its record {record_name} holds no object")
        try:  # the location stays a string: a URL is not a path
            record = parse_record(info, where, self.location, True, "")
        except BackupRecordError as error:
            return Version(self.location, weights, None, problem=error.problem)
        run, long_term, origin = (info.get("run"), info.get("long_term", False),
                                  info.get("origin"))
        problem = None
        if record.weights != weights:
            problem = f"its record names {record.weights}, not {weights}"
        elif weights not in names:
            problem = "is missing (its record is there)"
        elif names[weights] != record.size:
            problem = (f"has {names[weights]} bytes where {record.size} were written "
                       "(truncated or overwritten)")
        return Version(self.location, weights, record,
                       run if isinstance(run, str) else None, long_term is True, problem,
                       origin if isinstance(origin, str) else None)

    def state(self, version: Version) -> tuple[VersionState, str | None]:
        """The version's state with the weights read and hashed, and what is wrong."""
        if version.partial:
            return VersionState.PARTIAL, "no record: a copy cut short or arrived damaged"
        problem = version.problem or self.check(version)
        return (VersionState.VERIFIED, None) if problem is None else (
            VersionState.DAMAGED, problem)

    def check(self, version: Version) -> str | None:
        """What is wrong with the version's weights (read whole and hashed); None if good."""
        if version.record is None:
            return version.problem or "has no record"
        try:
            with self._files.open(version.name) as handle:
                sha256, size = sha256_stream(handle)
        except FileNotFoundError:
            return "is missing (its record is there)"
        except Exception as error:
            return f"cannot be read ({type(error).__name__}: {error})"
        return _mismatch(version.record, sha256, size)

    def fetch(self, version: Version, destination: Path) -> str | None:
        """Copy the version's weights to ``destination`` (a local path), checking them on the
        way; returns what is wrong (the file is then removed), or None."""
        if version.record is None or version.problem:
            return version.problem or "has no record"
        try:
            with self._files.open(version.name) as source, open(destination, "wb") as out:
                digest, size = sha256_stream(source, copy_to=out)
        except Exception as error:  # the store's error or the local disk's
            with contextlib.suppress(FileNotFoundError):
                os.unlink(destination)
            return f"cannot be fetched ({type(error).__name__}: {error})"
        problem = _mismatch(version.record, digest, size)
        if problem:
            os.unlink(destination)
        return problem

    def finished_runs(self) -> set[str]:
        """The trainings that ended normally (their backup deleted): not to be resumed."""
        return {match.group(1) for name in self._names()
                if (match := _FINISHED.fullmatch(name))}

    def put(self, source: Path, record: BackupRecord, run: str | None,
            long_term: bool = False, origin: str | None = None) -> Version:
        """Copy ``source`` (weights matching ``record``) in as a new version, check it on
        arrival, then write its record. A version already there is never replaced. ``origin``
        is the backup folder it comes from, recorded to tell trainings apart at a restore.

        Raises:
            StoreError: the write failed, the copy arrived with another size or SHA-256 (it
                stays as a partial version), or a different file holds the name.
        """
        owner = f"{run[:RUN_NAME_HEX]}-" if run else ""
        stem = f"weights-{owner}{record.generation:06d}-{record.sha256[:12]}"
        name, record_name = f"{stem}.weights.h5", f"{stem}.json"
        names = self._names()
        version = Version(self.location, name, replace(record, weights=name), run, long_term,
                          origin=origin)
        if record_name in names:
            existing = next((v for v in self.versions() if v.name == name), None)
            if existing is not None and existing.record is not None and (
                    existing.record.sha256 == record.sha256 and self.check(existing) is None):
                return existing  # copied before (a restart re-copying its backup)
            raise StoreError(f"{version.where}: another version holds this name; not "
                             "overwritten")
        if name in names:  # an earlier copy cut short before its record
            problem = self.check(replace(version, problem=None))
            if problem is not None:
                raise StoreError(f"{version.where}: a partial copy holds this name and {problem}"
                                 "; not overwritten")
        else:
            try:
                self._files.put(name, source)
            except Exception as error:
                raise self._fail(f"write {name}", error) from None
            problem = self.check(version)
            if problem is not None:
                raise StoreError(f"{version.where} arrived damaged: {problem}; left as a "
                                 "partial version, not recorded")
        info = {"format": FORMAT, "run": run, "long_term": long_term,
                **({"origin": origin} if origin else {}), **version.record.to_json()}
        try:
            self._files.write(record_name, json.dumps(info).encode())
        except Exception as error:
            raise self._fail(f"write {record_name}", error) from None
        return version

    def prune(self, keep: int, run: str | None = None) -> list[str]:
        """Delete the versions of training ``run`` older than its ``keep`` newest good ones
        (long-term versions and partial ones excepted): the record first, then the weights.
        Other trainings' versions are never touched (``run`` None: every version counts, for
        a location of one training). Returns the names deleted."""
        versions = [v for v in self.versions() if v.record is not None
                    and (run is None or v.run == run)]
        good = [v for v in versions if v.problem is None]
        if len(good) <= keep:
            return []
        oldest_kept = good[keep - 1].record.order
        deleted = []
        for version in versions:
            if version.long_term or version.record.order >= oldest_kept or version in good[:keep]:
                continue
            try:
                self._files.remove(version.name[:-len(".weights.h5")] + ".json")
                self._files.remove(version.name)
            except Exception as error:
                raise self._fail(f"delete {version.name}", error) from None
            deleted.append(version.name)
        return deleted

    def resumable(self, run: str | None, origin: str | None = None
                  ) -> tuple[list[Version], list[Version]]:
        """The versions a restore may take, newest first, and the newest version of each
        unfinished training passed over. Taken: training ``run``'s (the one the local backup
        names); where nothing names one, those of the one unfinished training copied from
        ``origin`` (this backup folder; versions that record no origin count as its own).
        Finished trainings' versions are never resumed, other trainings' never taken.

        Raises:
            StoreError: the location cannot be listed.
            SharedStoreError: ``run`` is None and several unfinished trainings copied from
                this folder share the location: which to resume cannot be told.
        """
        finished = self.finished_runs()
        unfinished = [v for v in self.versions()
                      if v.record is not None and v.run not in finished]
        newest: dict[str | None, Version] = {}
        for version in unfinished:  # newest first: each training's newest version
            newest.setdefault(version.run, version)
        if run is not None:
            mine = {run}
        else:
            mine = {owner for owner, v in newest.items() if v.origin in (None, origin)}
        if len(mine) > 1:
            shown = "; ".join(
                f"run {owner[:RUN_NAME_HEX] if owner else '(unnamed)'}: after "
                f"{newest[owner].record.epoch} epochs, {newest[owner].name}"
                for owner in newest if owner in mine)
            raise SharedStoreError(
                f"{self.location}: holds the unfinished backups of {len(mine)} trainings "
                f"({shown}) and no local backup says which one this is: none is restored, "
                "as another training's weights must never be. Hint: give each training a "
                "copy_to of its own; to resume one of these, delete the others' "
                "weights-<run>-* files there (tfopt backups --copy-to lists them)")
        return ([v for v in unfinished if v.run in mine],
                [v for owner, v in newest.items() if owner not in mine])

    def mark_finished(self, run: str) -> None:
        """Record that training ``run`` ended normally (once; never rewritten)."""
        name = f"finished-{run}.json"
        if name in self._names():
            return
        try:
            self._files.write(name, json.dumps({"run": run}).encode())
        except Exception as error:
            raise self._fail(f"write {name}", error) from None


def _mismatch(record: BackupRecord, sha256: str, size: int) -> str | None:
    if record.size is not None and size != record.size:
        return f"has {size} bytes where {record.size} were written (truncated or overwritten)"
    if sha256 != record.sha256:
        return "is damaged: its SHA-256 is not the one recorded when it was written"
    return None


class BackupCopier:
    """Copies each committed backup to a :class:`BackupStore` in a background thread.

    :meth:`submit` hands over a private hard link to the weights (deleted once copied, so the
    backup folder's own retention cannot pull the file away mid-copy). One copy runs at a
    time; a backup submitted while another waits replaces it (the copy keeps up with the
    newest backup instead of queueing). A failed copy is logged as a warning and never stops
    training; :attr:`failures` keeps the messages.

    Args:
        store: Where to copy.
        keep: The store's own retention: the newest good versions to keep (long-term ones
            are never deleted), or None to delete nothing there. Defaults to None.
        origin: The backup folder the copies come from, recorded in each version's record.
    """

    def __init__(self, store: BackupStore, keep: int | None = None, origin: str | None = None):
        self.store, self.keep, self.origin = store, keep, origin
        self.copied: list[Version] = []
        self.failures: list[str] = []
        self._lock = threading.Condition()
        self._pending: tuple | None = None
        self._busy = False
        self._closing = False
        self._thread: threading.Thread | None = None

    def submit(self, link: Path, record: BackupRecord, run: str | None,
               long_term: bool = False) -> None:
        with self._lock:
            if self._pending is not None:
                dropped = self._pending
                with contextlib.suppress(FileNotFoundError):
                    dropped[0].unlink()
                logger.info("%s: %s not copied: a newer backup came before its copy started",
                            self.store.location, dropped[1].weights)
            self._pending = (link, record, run, long_term)
            self._closing = False
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="tfopt-backup-copy",
                                                daemon=True)
                self._thread.start()
            self._lock.notify_all()

    def wait(self) -> None:
        """Block until the copy in flight and the one waiting are done."""
        with self._lock:
            while self._pending is not None or self._busy:
                self._lock.wait()

    def close(self) -> None:
        """Wait for the pending copies, then end the thread (a later submit starts one)."""
        self.wait()
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _work(self) -> None:
        while True:
            with self._lock:
                while self._pending is None and not self._closing:
                    self._lock.wait()
                if self._pending is None:
                    return
                job, self._pending, self._busy = self._pending, None, True
            try:
                self._copy(*job)
            finally:
                with self._lock:
                    self._busy = False
                    self._lock.notify_all()

    def _copy(self, link: Path, record: BackupRecord, run: str | None, long_term: bool) -> None:
        try:
            version = self.store.put(link, record, run, long_term, self.origin)
            self.copied.append(version)
            logger.info("copied the backup of epoch %d to %s", record.epoch, version.where)
            if self.keep is not None:
                for name in self.store.prune(self.keep, run):
                    logger.info("%s: deleted %s (more than copy_keep=%d newer versions)",
                                self.store.location, name, self.keep)
        except Exception as error:  # a copy must never stop training: said, and kept
            message = (f"{self.store.location}: the copy of {record.weights} (epoch "
                       f"{record.epoch}) failed: {error}; the local backup is kept and the "
                       "next backup is copied again")
            self.failures.append(message)
            logger.warning("%s", message)
        finally:
            with contextlib.suppress(FileNotFoundError):
                link.unlink()

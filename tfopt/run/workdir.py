"""What a run keeps in its workdir besides the backups: the steps_per_execution trial's choice.

Layout (the backups' own is in :mod:`tfopt.train.backup`)::

    WORKDIR/backup/...                 the kept backups a rerun resumes from (and copy_to's)
    WORKDIR/best.keras, best.json      the best model so far
    WORKDIR/history.csv                one row per epoch (appended to by a resumed run)
    WORKDIR/steps_per_execution.json   the trial's choice and rates, for the model it timed
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import NamedTuple

from tfopt._files import atomic_write_bytes, fsync_dir, read_small_json
from tfopt._lock import FolderBusyError, FolderLock, lock_folder
from tfopt.errors import TfoptError, WorkdirBusyError
from tfopt.train.backup import BEST_INFO_FILE, BEST_MODEL_FILE
from tfopt.train.backup_records import BACKUP_FOLDER, read_backup_folder
from tfopt.train.backup_store import BackupStore, StoreError
from tfopt.train.best_model import free_previous_number, keep_as_previous

logger = logging.getLogger("tfopt")

__all__ = ["HISTORY_FILE", "check_workdir_files", "earlier_results", "keep_earlier_results", "lock_workdir", "SPE_FILE", "XLA_FILE", "SpeChoice", "XlaChoice", "read_spe_choice",
           "read_xla_choice", "resume_point", "write_spe_choice", "write_xla_choice"]

HISTORY_FILE = "history.csv"
SPE_FILE = "steps_per_execution.json"
XLA_FILE = "xla_trial.json"
MAX_TRIAL_RECORD_BYTES = 1 << 20  # a trial's record: a few rates


def lock_workdir(workdir) -> FolderLock:
    """Hold ``workdir`` (made if absent) for this run: one writer per workdir, since two runs
    there would write the same backup names and prune each other's backups.

    Raises:
        tfopt.errors.WorkdirBusyError: Another process holds it (named, with what to do).
    """
    folder = Path(workdir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return lock_folder(folder)
    except FolderBusyError as busy:
        raise WorkdirBusyError(
            f"workdir={str(folder)!r}: in use by {busy.holder}; wait for that run to end, "
            "or give this one another workdir") from None
    except OSError as error:
        raise TfoptError(f"workdir={str(folder)!r}: cannot be used "
                         f"({error.strerror or error})") from None


def check_workdir_files(workdir) -> None:
    """Refuse a workdir whose files a run writes are links or not regular files: writing
    through a link would replace a file outside the workdir (a FIFO would hang the write).

    Raises:
        tfopt.TfoptError: The first such file, named with what it is.
    """
    names = (BEST_MODEL_FILE, BEST_INFO_FILE, HISTORY_FILE, SPE_FILE, XLA_FILE)
    for path in [Path(workdir) / name for name in names] + [Path(workdir) / BACKUP_FOLDER]:
        if path.is_symlink():
            what = f"a symbolic link to {os.readlink(path)!r}"
        elif not path.exists():
            continue
        elif path.name == BACKUP_FOLDER:
            if path.is_dir():
                continue
            what = "not a folder"
        elif path.is_file():
            continue
        else:
            what = "not a regular file"
        raise TfoptError(f"{path}: {what}; a run writes its own files in its workdir and "
                         "never through links or into special files: remove it, or give "
                         "another workdir")


def earlier_results(workdir) -> tuple[list[Path], int]:
    """A finished run's results in ``workdir`` (its best model, its value, its history) and
    the first N free for all of them as ``<name>-previous-N``; ([], 0) where there are none."""
    if workdir is None:
        return [], 0
    found = [Path(workdir) / name for name in (BEST_MODEL_FILE, BEST_INFO_FILE, HISTORY_FILE)]
    found = [path for path in found if path.is_file()]
    if not found:
        return [], 0
    return found, free_previous_number(found)


def keep_earlier_results(workdir) -> list[str]:
    """Rename a finished run's results in ``workdir`` to ``<name>-previous-N`` (one N for
    all), so that a new run there replaces none of them; the new names, best model first.

    A run that starts with no backup to resume writes its own ``best.keras`` and
    ``history.csv``: without this, running the same script again loses the finished run's
    history and best model.
    """
    found, number = earlier_results(workdir)
    # the model first: best.json alone never names a model that is not there
    kept = keep_as_previous(found, number)
    if kept:
        fsync_dir(Path(workdir))
        logger.warning("%s holds a finished run's results: kept as %s; this run writes its own",
                       workdir, ", ".join(kept))
    return kept


def resume_point(workdir: Path | None, copy_to=None) -> tuple[int, int, str | None]:
    """Where a rerun's fit resumes: the epochs the newest backup of ``workdir`` or ``copy_to``
    holds (0: none), the steps of the next epoch it holds besides (a backup taken mid-epoch on
    SIGTERM; else 0), and the copy's location when the newest is there (None: local).

    What the backup's restore takes first: the newest of the local folder's and the copy's
    (unfinished trainings', their weights of the recorded size), the local one on a tie. The
    weights are checked when the fit restores them; an older one taken then is warned about.

    Raises:
        tfopt.TfoptError: The local backup's record is unreadable and there is no copy to
            look in (the message names the file).
    """
    if workdir is None:
        return 0, 0, None
    try:
        candidates = read_backup_folder(Path(workdir) / BACKUP_FOLDER).candidates
    except TfoptError:
        if copy_to is None:
            raise
        candidates = ()  # the restore looks in the copy, and says why (backup.py)
    best = (candidates[0].order, 1, candidates[0], None) if candidates else None
    if copy_to is not None:
        store = BackupStore(copy_to)
        try:
            finished = store.finished_runs()
            versions = [v for v in store.versions() if v.record is not None
                        and not v.problem and v.run not in finished]
        except StoreError as error:
            logger.warning("%s; resuming from the local folder alone", error)
            versions = []
        if versions:
            newest = (versions[0].record.order, 0, versions[0].record, store.location)
            best = newest if best is None or newest[:2] > best[:2] else best
    return (0, 0, None) if best is None else (best[2].epoch, best[2].steps, best[3])


class SpeChoice(NamedTuple):
    """A trial's record: its ``steps_per_execution`` and rates (examples/s per candidate), and
    where it chose the precision too, the policy and each policy's best rate."""

    value: int
    rates: dict[int, float]
    policy: str | None = None
    policy_rates: dict[str, float] | None = None


def _trial_record(workdir: Path | None, name: str, key: dict,
                  trial: str) -> tuple[Path | None, dict | None]:
    """(path, record) of the trial file ``name`` in ``workdir`` when it holds a record for
    ``key``; record None without one (an unreadable file noted in the log: ``trial`` runs
    again)."""
    if workdir is None:
        return None, None
    path = Path(workdir) / name
    try:
        data = read_small_json(path, MAX_TRIAL_RECORD_BYTES)
    except FileNotFoundError:
        return path, None
    except (OSError, ValueError) as error:  # SmallFileError is a ValueError
        logger.info("%s: unreadable (%s); %s runs again", path, error, trial)
        return path, None
    if not isinstance(data, dict) or data.get("key") != key:
        return path, None
    return path, data


def read_spe_choice(workdir: Path | None, key: dict) -> SpeChoice | None:
    """The trial's choice cached for ``key`` (model, batch, policy), or None.

    A file of another key, or one that is not what :func:`write_spe_choice` writes, is ignored
    (with a note in the log): the trial runs again and replaces it.
    """
    path, data = _trial_record(workdir, SPE_FILE, key, "the steps_per_execution trial")
    if data is None:
        return None
    value, rates = data.get("value"), data.get("rates")
    policy, policy_rates = data.get("policy"), data.get("policy_rates")
    try:
        if type(value) is not int or value < 1 or not isinstance(rates, dict):
            raise ValueError("no choice")
        rates = {int(k): float(v) for k, v in rates.items()}
        if policy is not None:
            if not isinstance(policy, str) or not isinstance(policy_rates, dict):
                raise ValueError("no policy")
            policy_rates = {str(k): float(v) for k, v in policy_rates.items()}
    except (TypeError, ValueError):
        logger.info("%s: not a trial record; the trial runs again", path)
        return None
    return SpeChoice(value, rates, policy, policy_rates if policy is not None else None)


def write_spe_choice(workdir: Path, key: dict, value: int, rates: dict[int, float], *,
                     policy: str | None = None,
                     policy_rates: dict[str, float] | None = None) -> None:
    """Keep the trial's choice for a rerun of the same model (written atomically)."""
    Path(workdir).mkdir(parents=True, exist_ok=True)
    data = {"key": key, "value": value, "rates": {str(k): v for k, v in rates.items()}}
    if policy is not None:
        data.update(policy=policy, policy_rates=dict(policy_rates or {}))
    atomic_write_bytes(Path(workdir) / SPE_FILE, (json.dumps(data, indent=2) + "\n").encode())


class XlaChoice(NamedTuple):
    """An XLA trial's record: whether XLA was kept, why, and the rates without and with it."""

    chosen: bool
    reason: str
    rates: dict[bool, float]


def read_xla_choice(workdir: Path | None, key: dict) -> XlaChoice | None:
    """The XLA trial's choice cached for ``key`` (model, batch, policy, steps per call), or
    None; a record of another key, or not one :func:`write_xla_choice` writes, is ignored."""
    path, data = _trial_record(workdir, XLA_FILE, key, "the XLA trial")
    if data is None:
        return None
    chosen, reason, rates = data.get("chosen"), data.get("reason"), data.get("rates")
    if type(chosen) is not bool or not isinstance(reason, str) or not isinstance(rates, dict):
        logger.info("%s: not an XLA trial record; the trial runs again", path)
        return None
    try:
        rates = {{"true": True, "false": False}[k]: float(v) for k, v in rates.items()}
    except (KeyError, TypeError, ValueError):
        logger.info("%s: not an XLA trial record; the trial runs again", path)
        return None
    return XlaChoice(chosen, reason, rates)


def write_xla_choice(workdir: Path, key: dict, choice: XlaChoice) -> None:
    """Keep the XLA trial's choice for a rerun of the same model (written atomically)."""
    Path(workdir).mkdir(parents=True, exist_ok=True)
    data = {"key": key, "chosen": choice.chosen, "reason": choice.reason,
            "rates": {str(k).lower(): v for k, v in choice.rates.items()}}
    atomic_write_bytes(Path(workdir) / XLA_FILE, (json.dumps(data, indent=2) + "\n").encode())

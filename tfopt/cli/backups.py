"""``tfopt backups DIR``: the backup versions of a training, in its folder and its second
location, each with its state, and the one a restore would take. No TensorFlow."""

from __future__ import annotations

import time

import click

from tfopt.cli._common import echo_json, echo_text, json_option, table
from tfopt.train.backup_listing import Place, list_backups


def _when(seconds: float | None) -> str:
    return "-" if seconds is None else time.strftime("%Y-%m-%d %H:%M:%S",
                                                     time.localtime(seconds))


@click.command("backups")
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--copy-to", metavar="URL",
              help="The second location given as copy_to= (a path, s3://..., any fsspec URL).")
@json_option()
def backups(directory: str, copy_to: str | None, as_json: bool) -> None:
    """The backups of DIR (the folder given to backup_callbacks, or tfopt.Run's workdir) and
    of --copy-to, newest first: verified, damaged or partial (every file is read and its
    SHA-256 checked), and which one a restore takes."""
    listing = list_backups(directory, copy_to, argument="--copy-to")
    if as_json:
        echo_json(listing.to_json())
        return
    for problem in listing.problems:
        echo_text(f"tfopt: warning: {problem}", err=True)
    long_term = sorted({e.location for e in listing.entries if e.place is Place.LONG_TERM})
    shown = [str(listing.folder), *long_term, *([listing.copy_to] if listing.copy_to else [])]
    places = ", ".join(shown[:-1]) + " and " + shown[-1] if len(shown) > 1 else shown[0]
    if not listing.entries:
        echo_text(f"no backups in {places}: a fit would start from scratch")
        return
    rows = []
    for entry in listing.entries:
        record = entry.record
        state = entry.state.value + (" (finished run)" if entry.finished else
                                     " (another training)" if entry.other_training else "")
        rows.append([entry.place.value, "-" if record is None else record.epoch,
                     "-" if record is None else record.batch,
                     _when(None if record is None else record.time), state,
                     entry.name + (f": {entry.problem}" if entry.problem else "")])
    echo_text(f"backups in {places}, newest first:")
    echo_text(table(rows, ["place", "epochs", "batch", "written", "state", "file"],
                     "lrrlll"))
    chosen = listing.restore
    if listing.shared:
        echo_text("restore: none: a fit stops, as said above (several trainings share the copy)")
    elif chosen is None:
        recorded = any(entry.record is not None and entry.place is not Place.LONG_TERM
                       and not entry.finished and not entry.other_training
                       for entry in listing.entries)
        echo_text("restore: none verifies: a fit stops with an error naming each" if recorded
                   else "restore: none: a fit starts from scratch")
    else:
        echo_text(f"restore: {chosen.place.value} {chosen.location.rstrip('/')}/{chosen.name} "
                   f"(after {chosen.record.epoch} epochs)")


COMMANDS = [backups]

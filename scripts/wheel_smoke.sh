#!/usr/bin/env bash
# Install tfopt the way a user does (a built wheel, not an editable checkout) into a fresh
# virtual environment, then run a smoke job from a folder outside the repository against the
# installed copy: demo data -> convert -> verify -> inspect -> one pipeline epoch.
# An editable install hides packaging mistakes (a package folder the wheel leaves out still
# imports from the checkout); this catches them. Needs .venv (scripts/test.sh makes it) for the
# build tools; the fresh environment gets its dependencies from the package registry.
set -euo pipefail
source "$(dirname "$0")/_venv.sh"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tfopt-wheel.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

echo "== building the wheel" >&2
# from a copy of the tracked files: a checkout's stale build/ folder could fill a gap
mkdir "$WORK/src"
git -C "$REPO" ls-files -z | (cd "$REPO" && xargs -0 tar -cf - --) | tar -xf - -C "$WORK/src"
python -m pip wheel --quiet --no-deps --no-build-isolation -w "$WORK/dist" "$WORK/src"
WHEEL="$(ls "$WORK"/dist/tfopt-*.whl)"

echo "== the wheel holds every tracked module of tfopt/, and nothing else" >&2
# a package folder the wheel leaves out still imports from an editable checkout
python - "$WHEEL" "$WORK/src" <<'PY'
import sys, zipfile
from pathlib import Path
wheel, source = sys.argv[1], Path(sys.argv[2])
packed = {name for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".py")}
tracked = {p.relative_to(source).as_posix() for p in (source / "tfopt").rglob("*.py")}
assert len(tracked) > 50, f"only {len(tracked)} modules found under {source}/tfopt"
missing, extra = sorted(tracked - packed), sorted(packed - tracked)
assert not missing and not extra, f"left out of the wheel: {missing}; not tracked: {extra}"
print(f"{len(packed)} modules, as tracked", file=sys.stderr)
PY

echo "== installing $(basename "$WHEEL") into a fresh environment" >&2
python3 -m venv "$WORK/env"
"$WORK/env/bin/python" -m pip install --quiet --upgrade pip
"$WORK/env/bin/python" -m pip install --quiet "$WHEEL"

mkdir "$WORK/run"
cd "$WORK/run"  # not the checkout: nothing may import from it
export PATH="$WORK/env/bin:$PATH"
unset PYTHONPATH
python - "$WORK/env" <<'PY'
import sys, tfopt
where = tfopt.__file__
assert where.startswith(sys.argv[1]), f"tfopt imported from {where}, not the installed wheel"
print(f"tfopt {tfopt.__version__} from {where}", file=sys.stderr)
PY

echo "== smoke: demo-data, convert, verify, inspect, one pipeline epoch" >&2
tfopt demo-data images --count 60 --classes 3 --quiet
tfopt convert images shards --val-fraction 0.2 --quiet
tfopt verify shards
tfopt inspect shards --fast
python - <<'PY'
import tfopt
pipeline = tfopt.PipelineBuilder("shards", split="train", batch_size=8, training=True,
                                 image_size=64)
steps = pipeline.steps_per_epoch  # a training pipeline repeats: one epoch is this many steps
seen = sum(int(images.shape[0]) for images, labels in pipeline.build().take(steps))
assert steps >= 5 and seen == steps * 8, f"one epoch of {steps} steps gave {seen} images"
print(f"one pipeline epoch: {steps} batches, {seen} images", flush=True)
PY
echo "wheel smoke passed" >&2

#!/usr/bin/env bash
# The main job on built-in demo data: make a deterministic image folder (3000 JPEGs, 10
# classes, 320-480 px), convert it into verified TFRecord shards, verify and inspect them, then
# benchmark tfopt's input pipeline against the usual ways on them.
# Everything lands in ./demo-data (or $DEMO_DIR). A few minutes on 2 cores, most of it the
# one-time install.
set -euo pipefail
source "$(dirname "$0")/_venv.sh"
DEMO="${DEMO_DIR:-$REPO/demo-data}"
COUNT="${DEMO_COUNT:-3000}"

if [ "$(cat "$DEMO/images/.complete" 2>/dev/null)" != "$COUNT" ]; then
    echo "== tfopt demo-data: $COUNT images" >&2
    tfopt demo-data "$DEMO/images" --count "$COUNT" --overwrite
    echo "$COUNT" > "$DEMO/images/.complete"
else
    echo "== reusing $DEMO/images ($COUNT images)" >&2
fi

echo "== tfopt convert (all cores, 10% validation split)" >&2
tfopt convert "$DEMO/images" "$DEMO/shards" --val-fraction 0.1 --overwrite

echo "== tfopt verify" >&2
tfopt verify "$DEMO/shards"

echo "== tfopt inspect" >&2
tfopt inspect "$DEMO/shards" --fast

echo "== tfopt bench pipeline (training, 224 px, 2 epochs, 3 alternating runs)" >&2
echo "   epoch 1 fills the cache (the first fill in a fresh process runs below the guide's" >&2
echo "   pace: new memory), epoch 2 reads from it; on a busy machine single runs vary by" >&2
echo "   tens of percent: docs/benchmarks.md's figures are medians of 5-7 runs (its commands)" >&2
tfopt bench pipeline "$DEMO/shards" --split train --epochs 2 --repeats 3

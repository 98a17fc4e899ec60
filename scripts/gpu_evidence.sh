#!/usr/bin/env bash
# Record what `tfopt monitor` and `tfopt doctor` report on this machine, into OUTDIR:
#   doctor.json, doctor.txt     the environment check (--json and the table)
#   monitor.jsonl, monitor.txt  three one-second samples per GPU (the JSON lines and the table)
#   nvidia-smi.csv              the same fields from nvidia-smi, to check the figures against
#   exit-codes.txt              each command's exit code (monitor exits 1 where there is no GPU)
#
# Made for a GPU machine that has NVML (nvidia-ml-py), click and numpy but not TensorFlow:
# it runs `python -m tfopt` from this checkout, without installing anything, so one short
# call does it. The results go to docs/samples/ as evidence.
#
# Usage: scripts/gpu_evidence.sh OUTDIR   (PYTHON=... to choose the interpreter)
set -u
out=${1:?usage: scripts/gpu_evidence.sh OUTDIR}
cd "$(dirname "$0")/.."
mkdir -p "$out"
python=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
: > "$out/exit-codes.txt"

record() {  # record NAME COMMAND...: run it, note its exit code
    local name=$1
    shift
    "$@"
    echo "$name $?" >> "$out/exit-codes.txt"
}

record doctor-json "$python" -m tfopt doctor --json > "$out/doctor.json" 2> "$out/doctor.err"
record doctor "$python" -m tfopt doctor > "$out/doctor.txt" 2>> "$out/doctor.err"
rm -f "$out/monitor.jsonl"  # monitor appends: start from nothing
record monitor "$python" -m tfopt monitor -n 1 --count 3 --jsonl "$out/monitor.jsonl" \
    > "$out/monitor.txt" 2>&1
if command -v nvidia-smi > /dev/null; then
    record nvidia-smi nvidia-smi --format=csv --query-gpu=index,name,uuid,driver_version,utilization.gpu,utilization.memory,memory.used,memory.total,power.draw,power.limit,temperature.gpu,clocks.sm,clocks.mem,pstate \
        > "$out/nvidia-smi.csv" 2>&1
else
    echo "nvidia-smi 127" >> "$out/exit-codes.txt"
fi
cat "$out/exit-codes.txt"

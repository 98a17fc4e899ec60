#!/usr/bin/env bash
# Record what `tfopt monitor` and `tfopt doctor` report on this machine, into OUTDIR:
#   doctor.json, doctor.txt     the environment check (--json and the table)
#   monitor.jsonl, monitor.txt  three one-second samples per GPU (the JSON lines and the table)
#   gpm.json, gpm.err           NVML's GPM read straight through nvidia-ml-py, as this user: per
#                               GPU, whether nvmlGpmQueryDeviceSupport says supported, and
#                               whether two samples a second apart and nvmlGpmMetricsGet give
#                               the four counters tfopt shows (settles whether GPM needs root)
#   nvidia-smi.csv              the same fields from nvidia-smi, to check the figures against
#   exit-codes.txt              each command's exit code (monitor and gpm exit 1 where there is
#                               no GPU)
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
record gpm "$python" - "$out/gpm.json" > "$out/gpm.err" 2>&1 <<'PY'
import importlib.metadata, json, os, sys, time

report = {"euid": os.geteuid(), "gpus": []}


def done(code):
    with open(sys.argv[1], "w") as file:
        json.dump(report, file, indent=2)
    sys.exit(code)


try:
    report["nvidia_ml_py"] = importlib.metadata.version("nvidia-ml-py")
    import pynvml as nvml

    nvml.nvmlInit()
except Exception as error:  # no package, no driver: what monitor also reports
    report["error"] = f"NVML not usable: {error!r}"
    done(1)
metrics = {"sm_active": 2, "sm_occupancy": 3, "tensor_active": 5, "dram_bw_util": 10}
for index in range(nvml.nvmlDeviceGetCount()):
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    gpu = {"index": index, "name": str(nvml.nvmlDeviceGetName(handle))}
    report["gpus"].append(gpu)
    try:
        gpu["supported"] = bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except Exception as error:
        gpu["supported"], gpu["query_error"] = None, repr(error)
    if not gpu["supported"]:
        continue
    samples = []
    try:
        samples = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
        nvml.nvmlGpmSampleGet(handle, samples[0])
        time.sleep(1.0)  # NVML wants the two samples more than 100 ms apart
        nvml.nvmlGpmSampleGet(handle, samples[1])
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(metrics)
        request.sample1, request.sample2 = samples
        for slot, metric in enumerate(metrics.values()):
            request.metrics[slot].metricId = metric
        nvml.nvmlGpmMetricsGet(request)
        gpu["metrics"] = {name: {"nvml_return": request.metrics[slot].nvmlReturn,
                                 "value": request.metrics[slot].value}
                          for slot, name in enumerate(metrics)}
        gpu["read"] = all(m["nvml_return"] == 0 for m in gpu["metrics"].values())
    except Exception as error:
        gpu["read"], gpu["read_error"] = False, repr(error)
    for sample in samples:
        nvml.nvmlGpmSampleFree(sample)
nvml.nvmlShutdown()
done(0)
PY
if command -v nvidia-smi > /dev/null; then
    record nvidia-smi nvidia-smi --format=csv --query-gpu=index,name,uuid,driver_version,utilization.gpu,utilization.memory,memory.used,memory.total,power.draw,power.limit,temperature.gpu,clocks.sm,clocks.mem,pstate \
        > "$out/nvidia-smi.csv" 2>&1
else
    echo "nvidia-smi 127" >> "$out/exit-codes.txt"
fi
cat "$out/exit-codes.txt"

"""Table, CSV and JSON-lines forms of snapshots."""

from __future__ import annotations

from tfopt.gpu.snapshot import GpuProcess, GpuSnapshot
from tfopt.gpu.table import CSV_FIELDS, NA, format_table, marks, snapshot_record, to_csv_row

GIB = 1 << 30


def full(index=0, **changes):
    values = dict(index=index, timestamp=1_700_000_000.25, name="NVIDIA A100-SXM4-40GB",
                  uuid="GPU-x", gpu_util=97, mem_util=40, memory_used=30 * GIB,
                  memory_total=40 * GIB, power_w=250.4, power_limit_w=400.0, temperature_c=65,
                  sm_clock_mhz=1410, mem_clock_mhz=1215, clock_reasons=(), pstate=0,
                  processes=(GpuProcess(1, GIB), GpuProcess(2, None)),
                  compute_capability=(8, 0))
    values.update(changes)
    return GpuSnapshot(**values)


def test_table_has_a_row_per_gpu_with_marks():
    table = format_table([full(0), full(1, gpu_util=12, clock_reasons=("sw_power_cap",))],
                         low_util=50, title="driver 550")
    lines = table.splitlines()
    assert "driver 550" in lines[0] and lines[1].startswith("GPU")
    assert len(lines) == 4
    assert "30720 / 40960" in lines[2] and "250 / 400" in lines[2] and "P0" in lines[2]
    assert "THROTTLE" not in lines[2] and "LOW-UTIL" not in lines[2]
    assert "THROTTLE(sw_power_cap)" in lines[3] and "LOW-UTIL(12%)" in lines[3]


def test_unsupported_fields_print_as_na():
    row = format_table([GpuSnapshot(index=0, timestamp=0.0, name="T4")]).splitlines()[2]
    assert row.count(NA) >= 8
    assert "LOW-UTIL" not in row  # unknown utilisation is not low


def test_marks_for_error_and_thresholds():
    assert marks(full(gpu_util=60), low_util=80) == ["LOW-UTIL(60%)"]
    assert marks(full(gpu_util=60), low_util=50) == []
    assert marks(GpuSnapshot(0, 0.0, error="lost")) == ["ERROR(lost)"]


def test_record_and_csv_row():
    record = snapshot_record(full(clock_reasons=("gpu_idle", "hw_thermal"), gpu_util=10))
    assert tuple(record) == CSV_FIELDS
    assert record["timestamp"] == "2023-11-14T22:13:20.250+00:00"
    assert record["memory_used_mib"] == 30 * 1024 and record["pstate"] == "P0"
    assert record["throttled"] is True and record["low_util"] is True
    assert record["processes"] == 2 and record["process_memory_mib"] == 1024
    row = to_csv_row(record)
    assert row[CSV_FIELDS.index("clock_reasons")] == "gpu_idle;hw_thermal"
    empty = to_csv_row(snapshot_record(GpuSnapshot(index=3, timestamp=0.0)))
    assert empty[CSV_FIELDS.index("index")] == "3"
    assert empty[CSV_FIELDS.index("power_w")] == "" and empty[CSV_FIELDS.index("pstate")] == ""


def test_process_memory_when_no_process_or_unknown():
    assert snapshot_record(full(processes=()))["process_memory_mib"] == 0
    unknown = full(processes=(GpuProcess(1, None),))
    assert snapshot_record(unknown)["process_memory_mib"] is None
    assert snapshot_record(full(processes=None))["processes"] is None


def test_gpm_counters_print_as_percent_and_as_not_supported_never_as_zero():
    hopper = full(0, name="NVIDIA H100 80GB HBM3", sm_active=61.46, sm_occupancy=33.25,
                  tensor_active=47.0, dram_bw_util=12.5, gpm_supported=True)
    ampere = full(1, gpm_supported=False, gpm_reason="the GPU has no GPM counters")
    lines = format_table([hopper, ampere]).splitlines()
    assert "Kernel" in lines[1] and "SMAct" in lines[1] and "Tensor" in lines[1]
    assert "61%" in lines[2] and "33%" in lines[2] and "47%" in lines[2] and "12%" in lines[2]
    assert lines[3].count("n/s") == 4 and " 0%" not in lines[3]
    unread = format_table([full(2)]).splitlines()[2]  # GPM not read: N/A, not "n/s"
    assert "n/s" not in unread


def test_gpm_record_and_csv_cell_say_whether_and_why():
    record = snapshot_record(full(sm_active=61.46, sm_occupancy=33.25, tensor_active=47.0,
                                  dram_bw_util=12.5, gpm_supported=True))
    assert (record["sm_active"], record["sm_occupancy"]) == (61.5, 33.2)
    assert record["gpm"] == {"supported": True, "reason": None}
    assert to_csv_row(record)[CSV_FIELDS.index("gpm")] == "supported"
    none = snapshot_record(full(gpm_supported=False, gpm_reason="the GPU has no GPM counters"))
    assert none["sm_active"] is None and none["gpm"]["supported"] is False
    assert to_csv_row(none)[CSV_FIELDS.index("gpm")] == (
        "not supported: the GPU has no GPM counters")
    assert to_csv_row(none)[CSV_FIELDS.index("sm_active")] == ""
    assert to_csv_row(snapshot_record(full()))[CSV_FIELDS.index("gpm")] == ""  # not read

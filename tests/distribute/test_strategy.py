"""The strategy selector: every branch decided from device lists, CPU branches built for real."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from conftest import TWO_LOGICAL_CPUS

from tfopt.distribute.strategy import (
    STRATEGY_NAMES,
    StrategyKind,
    StrategyPlan,
    plan_strategy,
    select_strategy,
)
from tfopt.errors import InvalidArgumentError

CPU = ["/physical_device:CPU:0"]
GPUS = [*CPU, "/physical_device:GPU:0", "/physical_device:GPU:1", "/physical_device:GPU:2"]
ONE_GPU = [*CPU, "/physical_device:GPU:0"]
TPUS = [*CPU, *(f"/device:TPU:{i}" for i in range(8))]

TWO_WORKERS = {"cluster": {"worker": ["localhost:2222", "localhost:2223"]},
               "task": {"type": "worker", "index": 0}}
SLURM = {"SLURM_JOB_NODELIST": "node[1-2]", "SLURM_NTASKS": "2", "SLURM_PROCID": "0"}


@pytest.fixture
def clean_env(monkeypatch):
    """This process's environment without a cluster or TPU that would change "auto"."""
    for name in ("TF_CONFIG", "TPU_NAME", "COLAB_TPU_ADDR", "SLURM_JOB_NODELIST",
                 "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS"):
        monkeypatch.delenv(name, raising=False)


def plan(name="auto", devices=CPU, environ=None, **kwargs):
    return plan_strategy(name, devices=devices, environ=environ or {}, **kwargs)


# -- the decision, from the devices and cluster it sees ---------------------------------------


def test_auto_on_cpu_only_is_the_default_strategy():
    assert plan().kind is StrategyKind.DEFAULT
    # logical CPUs are no reason to mirror: copies and an all-reduce, no extra compute
    assert plan(devices=["/device:CPU:0", "/device:CPU:1"]).kind is StrategyKind.DEFAULT


def test_auto_on_one_gpu_is_one_device_on_it():
    chosen = plan(devices=ONE_GPU)
    assert (chosen.kind, chosen.devices) == (StrategyKind.ONE_DEVICE, ("/gpu:0",))


def test_auto_on_several_gpus_mirrors_with_nccl_or_hierarchical_copy():
    with_nccl = plan(devices=GPUS, nccl=True)
    assert with_nccl.kind is StrategyKind.MIRRORED
    assert with_nccl.devices == ("/gpu:0", "/gpu:1", "/gpu:2")
    assert with_nccl.all_reduce == "nccl" and "NCCL" in with_nccl.reason
    without = plan(devices=GPUS, nccl=False)
    assert without.all_reduce == "hierarchical_copy" and "NCCL not available" in without.reason


def test_device_names_in_every_spelling_count_once():
    devices = ["/device:GPU:1", "/physical_device:GPU:1", "/gpu:0", "GPU:0", "/device:CPU:0"]
    assert plan(devices=devices, nccl=True).devices == ("/gpu:0", "/gpu:1")


def test_auto_with_tpu_devices_or_a_named_tpu_is_tpu():
    from_devices = plan(devices=TPUS)
    assert (from_devices.kind, from_devices.cluster_source) == (StrategyKind.TPU, "devices")
    assert len(from_devices.devices) == 8
    named = plan(devices=CPU, environ={"TPU_NAME": "my-tpu"})
    assert (named.kind, named.cluster_source) == (StrategyKind.TPU, "environment")


def test_auto_with_a_tpu_resolver_is_tpu():
    class TPUClusterResolver:  # stands for the real one, which needs a TPU to construct
        pass

    chosen = plan(cluster=TPUClusterResolver())
    assert (chosen.kind, chosen.cluster_source) == (StrategyKind.TPU, "resolver")


def test_auto_with_tf_config_of_several_workers_is_multi_worker():
    for cluster in (TWO_WORKERS, json.dumps(TWO_WORKERS)):
        chosen = plan(devices=GPUS, cluster=cluster, nccl=True)
        assert (chosen.kind, chosen.cluster_source) == (StrategyKind.MULTI_WORKER, "tf_config")
        assert "2 workers" in chosen.reason
    from_env = plan(devices=GPUS, environ={"TF_CONFIG": json.dumps(TWO_WORKERS)})
    assert from_env.kind is StrategyKind.MULTI_WORKER
    chief = {"cluster": {"chief": ["a:1"], "worker": ["b:1"]}, "task": {"type": "chief"}}
    assert plan(cluster=chief).kind is StrategyKind.MULTI_WORKER


def test_auto_with_tf_config_of_one_worker_decides_from_the_local_devices():
    one = {"cluster": {"worker": ["localhost:2222"]}, "task": {"type": "worker", "index": 0}}
    assert plan(devices=ONE_GPU, cluster=one).kind is StrategyKind.ONE_DEVICE


def test_auto_in_a_slurm_step_of_several_tasks_is_multi_worker():
    chosen = plan(devices=GPUS, environ=SLURM)
    assert (chosen.kind, chosen.cluster_source) == (StrategyKind.MULTI_WORKER, "slurm")
    # a batch script's own step has one task even in a job of two: not a cluster
    batch_step = {**SLURM, "SLURM_STEP_NUM_TASKS": "1"}
    assert plan(devices=CPU, environ=batch_step).kind is StrategyKind.DEFAULT
    assert plan(environ={**SLURM, "SLURM_NTASKS": "1"}).kind is StrategyKind.DEFAULT
    assert plan(environ={"SLURM_NTASKS": "4"}).kind is StrategyKind.DEFAULT  # no node list
    # TF_CONFIG, when both are there, says what the job wants
    tf_config = {**SLURM, "TF_CONFIG": json.dumps(TWO_WORKERS)}
    assert plan(environ=tf_config).cluster_source == "tf_config"


def test_a_name_overrides_the_rules():
    assert plan("default", devices=GPUS).kind is StrategyKind.DEFAULT
    assert plan("one_device", devices=GPUS).devices == ("/gpu:0",)
    assert plan("one_device", devices=CPU).devices == ("/cpu:0",)
    on_cpus = plan("mirrored", devices=["/device:CPU:0", "/device:CPU:1"])
    assert on_cpus.devices == ("/cpu:0", "/cpu:1")
    assert on_cpus.all_reduce == "reduction_to_one_device"
    assert plan("mirrored", devices=GPUS, nccl=False).all_reduce == "hierarchical_copy"
    local = plan("multi_worker")
    assert (local.kind, local.cluster_source) == (StrategyKind.MULTI_WORKER, "local")
    assert plan("MIRRORED", devices=ONE_GPU, nccl=True).devices == ("/gpu:0",)


def test_an_unknown_name_lists_the_valid_ones():
    with pytest.raises(InvalidArgumentError) as error:
        plan("horovod")
    assert "horovod" in str(error.value)
    assert all(name in str(error.value) for name in STRATEGY_NAMES)


def test_tpu_by_name_without_a_tpu_says_so():
    with pytest.raises(InvalidArgumentError, match="no TPU found"):
        plan("tpu", devices=GPUS)


@pytest.mark.parametrize("cluster, message", [
    ("{not json", "TF_CONFIG is not valid JSON"),
    ("[1, 2]", "JSON object"),
    ({"cluster": {"worker": ["a:1"], "ps": ["b:1"]}}, "ParameterServerStrategy"),
])
def test_a_bad_cluster_is_a_clear_error(cluster, message):
    with pytest.raises(InvalidArgumentError, match=message):
        plan(cluster=cluster)


def test_a_bad_device_name_is_a_clear_error():
    with pytest.raises(InvalidArgumentError, match="devices"):
        plan(devices=["gpu zero"])


# -- the result --------------------------------------------------------------------------


def test_plan_reports_its_replicas_and_the_global_batch():
    mirrored = plan("mirrored", devices=GPUS, nccl=True)
    assert (mirrored.name, mirrored.replicas, mirrored.workers) == ("mirrored", 3, 1)
    assert mirrored.global_batch(32) == 96
    for bad in (0, -1, 2.5, True):
        with pytest.raises(InvalidArgumentError, match="per_replica_batch"):
            mirrored.global_batch(bad)
    with pytest.raises(InvalidArgumentError, match="replicas"):
        mirrored.replace(replicas=0)
    assert plan().replicas == plan("one_device", devices=GPUS).replicas == 1
    assert "MirroredStrategy" in mirrored.describe() and "nccl" in mirrored.describe()


def test_a_multi_worker_plan_counts_workers_and_leaves_replicas_to_the_strategy():
    chosen = plan(cluster=TWO_WORKERS)
    assert (chosen.workers, chosen.replicas) == (2, None)
    assert "known once built" in chosen.describe()
    with pytest.raises(InvalidArgumentError, match="pass the strategy"):
        chosen.global_batch(32)

    class Built:  # what global_batch reads of a built strategy
        num_replicas_in_sync = 4

    assert chosen.global_batch(32, Built()) == 128
    assert "replicas     4" in chosen.describe(Built())
    with pytest.raises(InvalidArgumentError, match="kind"):
        StrategyPlan("auto", "r")


# -- built for real on this machine ----------------------------------------------------------


def test_select_on_this_cpu_only_machine_is_the_default_strategy(tf, clean_env):
    strategy = select_strategy()
    assert strategy is tf.distribute.get_strategy()
    with select_strategy().scope():  # the strategy itself, as Model Garden returns it
        assert tf.distribute.get_strategy() is strategy
    planned = plan_strategy()
    assert planned.name == "default" and planned.global_batch(64, strategy) == 64
    assert "default" in planned.describe(strategy)


def test_select_one_device_builds_it_on_the_cpu(tf, clean_env):
    planned = plan_strategy("one_device")
    strategy = select_strategy(planned)
    assert isinstance(strategy, tf.distribute.OneDeviceStrategy)
    assert planned.devices == ("/cpu:0",) and strategy.num_replicas_in_sync == 1


MIRRORED_SCRIPT = TWO_LOGICAL_CPUS + textwrap.dedent("""
    from tfopt.distribute.strategy import plan_strategy, select_strategy

    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 5)).astype("float32")
    y = rng.normal(size=(16, 1)).astype("float32")
    initial = [rng.normal(size=(5, 1)).astype("float32"), np.zeros(1, "float32")]

    def train(chosen, per_replica_batch):
        with select_strategy(chosen).scope():
            model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(1)])
            model.set_weights(initial)
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        # 16 examples at a global batch of 8: two SGD steps
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(
            chosen.global_batch(per_replica_batch))
        model.fit(data, epochs=1, verbose=0)
        return [w.tolist() for w in model.get_weights()]

    auto = plan_strategy()
    mirrored = plan_strategy("mirrored")
    single = plan_strategy("default")
    built = select_strategy(mirrored)
    print(json.dumps({
        "auto": [auto.name, select_strategy() is tf.distribute.get_strategy()],
        "mirrored": [type(built).__name__, built.num_replicas_in_sync,
                     list(mirrored.devices), mirrored.global_batch(4)],
        "initial": [w.tolist() for w in initial],
        "mirrored_weights": train(mirrored, 4),
        "single_weights": train(single, 8),
    }))
""")


def test_mirrored_on_two_logical_cpus_trains_like_one_device():
    done = subprocess.run([sys.executable, "-c", MIRRORED_SCRIPT], capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    # logical CPUs alone do not make auto mirror
    assert result["auto"] == ["default", True]
    assert result["mirrored"] == ["MirroredStrategy", 2, ["/cpu:0", "/cpu:1"], 8]
    import numpy as np

    for mirrored, single, initial in zip(result["mirrored_weights"], result["single_weights"],
                                         result["initial"], strict=True):
        np.testing.assert_allclose(mirrored, single, rtol=1e-5, atol=1e-6)
        assert not np.allclose(single, initial)  # the steps did change the weights


WORKER_SCRIPT = textwrap.dedent("""
    import json
    from tfopt._tf import import_tensorflow
    from tfopt.distribute.strategy import plan_strategy, select_strategy
    tf = import_tensorflow()
    planned = plan_strategy()
    strategy = select_strategy()
    print(json.dumps([planned.name, strategy.num_replicas_in_sync,
                      isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)]))
""")


def test_auto_under_tfopt_launch_is_multi_worker_with_a_replica_per_worker():
    from tfopt.distribute.launch import launch_workers

    lines = []
    result = launch_workers([sys.executable, "-c", WORKER_SCRIPT], 2, grace_seconds=5,
                            on_line=lambda index, stream, line: lines.append((index, line)))
    assert result.exit_code == 0, lines[-20:]
    reports = [json.loads(line) for _, line in lines if line.startswith("[")]
    assert reports == [["multi_worker", 2, True]] * 2

"""Cluster configuration: TF_CONFIG built and read, Slurm's variables, one error for bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tfopt.distribute.cluster import (
    ClusterInfo,
    cluster_info,
    cluster_tf_configs,
    free_ports,
    parse_hosts,
    parse_tf_config,
    tf_config,
)
from tfopt.errors import InvalidArgumentError

SLURM = {"SLURM_JOB_NODELIST": "node[1-3]", "SLURM_NTASKS": "3", "SLURM_PROCID": "2"}


def env(config) -> dict:
    return {"TF_CONFIG": json.dumps(config)}


# -- building TF_CONFIG ------------------------------------------------------------------------


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(4)
    assert len(set(ports)) == 4 and all(0 < port < 65536 for port in ports)


def test_tf_config_names_the_cluster_and_the_task():
    config = tf_config(["localhost:1", "localhost:2"], 1)
    assert config == {"cluster": {"worker": ["localhost:1", "localhost:2"]},
                      "task": {"type": "worker", "index": 1}}
    with pytest.raises(InvalidArgumentError, match="index=2"):
        tf_config(["localhost:1", "localhost:2"], 2)


def test_parse_hosts_checks_each_address():
    assert parse_hosts(" a:1, [::1]:2222 ") == ["a:1", "[::1]:2222"]
    for bad in ("node1", "node1:0", "node1:70000", ":2222", "", "a:1,a:1"):
        with pytest.raises(InvalidArgumentError, match="hosts"):
            parse_hosts(bad)


def test_cluster_tf_configs_for_hosts_and_for_local_ports():
    configs = cluster_tf_configs(hosts="node1:2222,node2:2222,node3:2222")
    assert [c["task"]["index"] for c in configs] == [0, 1, 2]
    assert all(c["cluster"]["worker"] == ["node1:2222", "node2:2222", "node3:2222"]
               for c in configs)
    local = cluster_tf_configs(workers=2)[0]["cluster"]["worker"]
    assert all(address.startswith("localhost:") for address in local)
    with pytest.raises(InvalidArgumentError, match="number of hosts"):
        cluster_tf_configs(workers=3, hosts="node1:2222,node2:2222")


def test_what_tf_config_builds_cluster_info_reads_back():
    addresses = ["localhost:1", "localhost:2", "localhost:3"]
    for index in range(3):
        info = cluster_info(env(tf_config(addresses, index)))
        assert info == ClusterInfo(3, index, "tf_config", "worker", tuple(addresses),
                                   {"worker": tuple(addresses)})
        assert info.is_multi_worker and info.is_chief == (index == 0)


# -- reading TF_CONFIG -------------------------------------------------------------------------


def test_no_cluster_is_one_local_worker():
    assert cluster_info({}) == ClusterInfo(1, 0, "local")
    assert cluster_info({"TF_CONFIG": ""}).source == "local"  # empty is unset, as for TensorFlow
    assert not cluster_info({}).is_multi_worker


def test_chief_first_then_workers_as_the_strategy_numbers_them():
    cluster = {"chief": ["c:1"], "worker": ["w:1", "w:2"], "evaluator": ["e:1"]}
    places = {("chief", 0): 0, ("worker", 0): 1, ("worker", 1): 2, ("evaluator", 0): None}
    for (task_type, index), place in places.items():
        info = cluster_info(env({"cluster": cluster, "task": {"type": task_type,
                                                              "index": index}}))
        # the evaluator runs no replica: three training workers, and it has no place
        assert (info.workers, info.index, info.task_type) == (3, place, task_type)
        assert info.addresses == ("c:1", "w:1", "w:2")
    # the chief's index may be left out
    chief = cluster_info(env({"cluster": cluster, "task": {"type": "chief"}}))
    assert chief.index == 0 and chief.is_chief


def test_a_parameter_server_cluster_is_read_and_ps_tasks_have_no_place():
    config = {"cluster": {"worker": ["w:1", "w:2"], "ps": ["p:1"]},
              "task": {"type": "ps", "index": 0}}
    info = cluster_info(env(config))
    assert (info.workers, info.index, info.cluster["ps"]) == (2, None, ("p:1",))


def test_other_forms_tensorflow_accepts():
    bare = cluster_info(cluster={"worker": ["a:1", "b:1"]})  # a bare cluster spec
    assert (bare.workers, bare.index, bare.source) == (2, None, "tf_config")
    as_text = cluster_info(cluster=json.dumps(tf_config(["a:1", "b:1"], 1)))
    assert as_text.index == 1
    sparse = parse_tf_config({"cluster": {"worker": {"1": "b:1", "0": "a:1"}},
                              "task": {"type": "worker", "index": "1"}})
    assert sparse == {"cluster": {"worker": ("a:1", "b:1")},
                      "task": {"type": "worker", "index": 1}}
    # a task without a cluster: TensorFlow runs it alone
    alone = cluster_info(env({"task": {"type": "worker", "index": 0}}))
    assert (alone.workers, alone.index) == (1, None)


def test_a_given_cluster_wins_over_the_environment():
    given = cluster_info(env(tf_config(["a:1", "b:1"], 1)), cluster=tf_config(["x:1"], 0))
    assert (given.workers, given.index) == (1, 0)


def test_a_cluster_resolver_is_read_through_its_cluster_spec():
    class Spec:
        def as_dict(self):
            return {"chief": ["c:1"], "worker": ["w:1"]}

    class Resolver:
        task_type, task_id = "worker", 0

        def cluster_spec(self):
            return Spec()

    info = cluster_info({}, cluster=Resolver())
    assert (info.workers, info.index, info.source) == (2, 1, "resolver")


@pytest.mark.parametrize("raw, message", [
    ("{not json", "TF_CONFIG is not valid JSON"),
    ("[1, 2]", "is not a JSON object"),
    ('{"cluster": ["a:1"]}', "cluster=.* is not an object"),
    ('{"cluster": {"worker": "a:1"}}', r"cluster\['worker'\]=.* is not a list"),
    ('{"cluster": {"worker": [1]}}', "is not a list of 'host:port' strings"),
    ('{"cluster": {"worker": ["a:1"]}, "task": "worker"}', "task='worker' is not an object"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "boss"}}', "task type 'boss'"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}}',
     "task index -1"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": true}}',
     "task index True"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}',
     "task worker 1 is not in the cluster, which lists 1 worker"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief"}}', "task chief 0"),
])
def test_a_malformed_tf_config_is_one_clear_error(raw, message):
    with pytest.raises(InvalidArgumentError, match=message) as error:
        cluster_info({"TF_CONFIG": raw})
    assert str(error.value).startswith("TF_CONFIG")
    assert '"task": {"type": "worker"' in str(error.value)  # the shape expected


# -- Slurm ------------------------------------------------------------------------------------


def test_a_slurm_step_of_several_tasks_is_a_cluster_with_the_rank_as_index():
    info = cluster_info(SLURM)
    assert (info.workers, info.index, info.source, info.addresses) == (3, 2, "slurm", ())
    # inside srun the step's own count is the one that holds
    assert cluster_info({**SLURM, "SLURM_STEP_NUM_TASKS": "4"}).workers == 4
    # a batch script's own step has one task even in a job of three: not a cluster
    assert cluster_info({**SLURM, "SLURM_STEP_NUM_TASKS": "1"}).source == "local"
    assert cluster_info({**SLURM, "SLURM_NTASKS": "1"}).source == "local"
    assert cluster_info({"SLURM_NTASKS": "4"}).source == "local"  # no node list: not Slurm
    # TF_CONFIG, when both are there, says what the job wants
    assert cluster_info({**SLURM, **env(tf_config(["a:1", "b:1"], 0))}).source == "tf_config"


@pytest.mark.parametrize("changes, message", [
    ({"SLURM_NTASKS": "many"}, "SLURM_NTASKS='many'"),
    ({"SLURM_STEP_NUM_TASKS": "-2"}, "SLURM_STEP_NUM_TASKS='-2'"),
    ({"SLURM_PROCID": "x"}, "SLURM_PROCID='x'"),
    ({"SLURM_PROCID": "3"}, "SLURM_PROCID=3: expected a rank from 0 to 2"),
])
def test_bad_slurm_variables_are_named(changes, message):
    with pytest.raises(InvalidArgumentError, match=message):
        cluster_info({**SLURM, **changes})


def test_cluster_info_reads_os_environ_by_default(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config(["a:1", "b:1"], 1)))
    assert cluster_info().index == 1


def test_the_cluster_module_imports_no_tensorflow():
    code = ("import sys, tfopt.distribute.cluster, tfopt.distribute.launch; "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip()
    assert out == "False"

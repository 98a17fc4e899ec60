"""PipelineConfig: what was asked, checked, with nothing resolved (no TensorFlow needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tfopt.data.config import PipelineConfig, make_config
from tfopt.data.plan import Facts, plan
from tfopt.errors import InvalidArgumentError

FACTS = Facts(files=4, records=1000, total_bytes=4 << 20, mean_record_bytes=4096.0,
              available_memory=8 << 30, usable_cores=4)


def test_replace_training_gets_the_training_defaults_as_if_given_at_construction():
    replaced = PipelineConfig(batch_size=32).replace(training=True)
    direct = PipelineConfig(batch_size=32, training=True)
    assert replaced == direct
    # was repeat=False, deterministic=True: evaluation's defaults, baked in before replace
    assert (replaced.repeat, replaced.deterministic, replaced.drop_remainder) == (None,) * 3
    assert plan(replaced, FACTS) == plan(direct, FACTS)
    resolved = plan(replaced, FACTS)
    assert resolved.repeat is True and resolved.deterministic is False
    # and back: what was asked explicitly is kept through replace
    kept = PipelineConfig(batch_size=32, repeat=False).replace(training=True)
    assert plan(kept, FACTS).repeat is False


def test_two_configs_with_the_same_arguments_are_equal_and_hash_alike():
    one = PipelineConfig(batch_size=32, training=True, image_size=224, seed=np.int64(3))
    two = PipelineConfig(batch_size=32, training=True, image_size=(224, 224), seed=3)
    assert one == two and hash(one) == hash(two)
    assert len({one, two}) == 1
    # nothing read from the machine: the RAM budget is the planner's, from the facts
    assert one.ram_budget is None
    assert plan(one.replace(image_size=None), FACTS).ram_budget == FACTS.available_memory // 2
    assert plan(one.replace(image_size=None, ram_budget=1 << 20), FACTS).ram_budget == 1 << 20


def test_configs_made_in_two_processes_are_equal(tmp_path):
    # another process sees other free memory; a config made there must still be the same value
    script = ("from tfopt.data.config import PipelineConfig; "
              "print(repr(PipelineConfig(batch_size=8, training=True, image_size=16)))")
    root = str(Path(__file__).resolve().parents[2])
    outputs = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              check=True, cwd=root).stdout for _ in range(2)}
    assert outputs == {repr(PipelineConfig(batch_size=8, training=True, image_size=16)) + "\n"}


@pytest.mark.parametrize("options, named", [
    ({"batch_size": True}, r"batch_size=True: expected an int >= 1"),
    ({"batch_size": 8.0}, r"batch_size=8.0"),
    ({"image_size": 24.7}, r"image_size=24.7"),
    ({"image_size": (24.9, 30)}, r"image_size=24.9"),
    ({"image_size": (1, 2, 3)}, r"image_size=\(1, 2, 3\): expected an int or \(height, width\)"),
    ({"training": "yes"}, r"training='yes': expected True or False"),
    ({"pad_ragged": 1}, r"pad_ragged=1: expected True or False"),
    ({"repeat": "no"}, r"repeat='no': expected True, False or None"),
    ({"prefetch_to_device": 0}, r"prefetch_to_device=0: expected True, False or None"),
    ({"ram_budget": 0}, r"ram_budget=0: expected an int >= 1"),
    ({"shuffle_bytes": "32MB"}, r"shuffle_bytes='32MB'"),
    ({"seed": -1}, r"seed=-1: expected an int >= 0"),
    ({"random_crop": "gpu"}, r"random_crop='gpu': expected True, False or 'device'"),
    ({"random_crop": 1}, r"random_crop=1: expected True, False or 'device'"),
    ({"cache": 0}, r"cache=0: expected 'auto', True, False or a file path"),
    ({"cache": "off"}, r"cache='off': expected 'auto', True, False or a file path; for no"),
    ({"service": "localhost"}, r"service='localhost'"),
])
def test_bad_fields_are_named_with_what_is_allowed(options, named):
    with pytest.raises(InvalidArgumentError, match=named):
        PipelineConfig(**{"batch_size": 8, **options})


def test_values_are_normalised_to_plain_types():
    config = PipelineConfig(batch_size=np.int32(8), image_size=np.int64(24), training=np.bool_(1),
                            random_crop=np.bool_(0), service="node1:7000")
    assert type(config.batch_size) is int and config.image_size == (24, 24)
    assert config.training is True and config.random_crop is False
    assert config.service == "grpc://node1:7000"
    assert PipelineConfig(batch_size=1, random_crop="device").random_crop == "device"


def test_unknown_fields_are_named_with_the_known_ones():
    with pytest.raises(InvalidArgumentError,
                       match=r"PipelineConfig.replace: unknown option\(s\) shuffle; expected one "
                             r"of: batch_size, training"):
        PipelineConfig(batch_size=8).replace(shuffle=True)
    with pytest.raises(InvalidArgumentError, match=r"PipelineBuilder: unknown option\(s\) shufle"):
        make_config(None, {"batch_size": 8, "shufle": True})


def test_make_config_takes_a_config_a_batch_size_or_fields():
    base = PipelineConfig(batch_size=8)
    assert make_config(base, {}) is base
    assert make_config(base, {"training": True}) == base.replace(training=True)
    assert make_config(16, {"training": True}) == PipelineConfig(batch_size=16, training=True)
    assert make_config(None, {"batch_size": 4}) == PipelineConfig(batch_size=4)


def test_config_and_plan_modules_import_no_tensorflow():
    script = ("import sys; import tfopt.data.config, tfopt.data.plan, tfopt.data.choices; "
              "from tfopt.data.plan import Facts, plan; from tfopt.data.config import "
              "PipelineConfig; from tfopt.data.choices import PipelineChoices; "
              "p = plan(PipelineConfig(batch_size=8, training=True, image_size=16), "
              "Facts(files=2, records=40, total_bytes=1 << 16, image_key='image', "
              "image_encoding='png', mean_image_pixels=400.0, min_image_side=20)); "
              "PipelineChoices.of(p).describe(); "
              "print(sorted(m for m in sys.modules if m.split('.')[0] in "
              "('tensorflow', 'keras')))")
    root = str(Path(__file__).resolve().parents[2])
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=root, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"

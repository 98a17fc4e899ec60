"""One public Keras example of tfopt's workload corpus, trained as the example trains it.

The workloads (``tfopt/bench/workloads/``, each citing its keras.io or tensorflow.org page)
reproduce public examples on data made locally; this script makes a workload's data, builds
its inputs and model and calls the example's own ``model.fit``, nothing of tfopt in between.
That is the script ``tfopt profile`` is run on for the public part of its corpus
(docs/benchmarks.md): the example unmodified.

Usage: python public_workload.py NAME [DATA_FOLDER] [SCALE]
"""

import sys
import tempfile

import keras

from tfopt.bench.workloads import NAMES, WORKLOADS


def main(argv):
    if not argv or argv[0] not in NAMES:
        sys.exit(f"usage: public_workload.py NAME [DATA_FOLDER] [SCALE]; NAME one of "
                 f"{', '.join(NAMES)}")
    workload = WORKLOADS[argv[0]]
    folder = argv[1] if len(argv) > 1 else tempfile.mkdtemp(prefix=f"{workload.name}-")
    scale = float(argv[2]) if len(argv) > 2 else 1.0
    data = workload.make_data(folder, 0, scale)
    inputs = workload.inputs(data)
    keras.utils.set_random_seed(0)
    model = workload.build_model(inputs)
    workload.compile(model)
    history = workload.plain_fit(model, inputs, workload.epochs)
    print({key: values[-1] for key, values in history.history.items()})


if __name__ == "__main__":
    main(sys.argv[1:])

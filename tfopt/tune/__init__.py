"""Settings chosen by experiment: the batch size (memory trials, throughput sweep) and
``steps_per_execution``.

Modules: :mod:`~tfopt.tune.search` (the largest batch that fits), :mod:`~tfopt.tune.sweep`
(the fastest batch), :mod:`~tfopt.tune.steps_per_execution`; beneath them
:mod:`~tfopt.tune.trials` (training-step trials, in process or in a subprocess),
:mod:`~tfopt.tune.memory`, :mod:`~tfopt.tune.oom`, :mod:`~tfopt.tune.model` and
:mod:`~tfopt.tune.results`. Design notes: ``docs/tune.md``.
"""

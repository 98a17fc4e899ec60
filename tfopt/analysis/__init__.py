"""Analysis of any ``tf.data`` pipeline: its stages, its measured rates, its bottleneck, and what
to change (``tfopt.analyze``; ``docs/analyze.md``).

Modules, by job: :mod:`.tfapi` (the private TensorFlow APIs used, pinned to tested versions),
:mod:`.graph` (the pipeline's graph read into stages), :mod:`.measure` (in-graph draining of
each prefix), :mod:`.model` (what ``get_model_proto`` says about each stage), :mod:`.advice`
(the allocation model: ceiling, bottleneck, recommendations; pure), :mod:`.report` (the
result), :mod:`.plot` (the result as a chart; pure), :mod:`.analyze` (the entry point). This
package's ``__init__`` imports nothing, so the pure modules stay TensorFlow-free.

The package is ``analysis``, not ``analyze``: a subpackage named like the public function
``tfopt.analyze`` would replace it on ``tfopt`` as soon as any of its modules is imported.
"""

"""mtcore: a Ray-based platform for machine-translation experiments (English↔Vietnamese first).

The library holds everything reusable; `mtcore.cli` is the commands' code (the `mtcore` console script),
which the `pipelines/` and `experiments/` scripts of a checkout run too.
"""

__version__ = "0.1.0"

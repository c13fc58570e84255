"""mtcore: a Ray-based platform for machine-translation experiments (English↔Vietnamese first).

The library holds everything reusable; `pipelines/` and `experiments/` are thin entry points.
"""

__version__ = "0.1.0"

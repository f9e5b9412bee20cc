"""The machinery shared by the three studies (Theorem 1, rank collapse, the Jena/SST-2 experiments).

* :mod:`.presets` — every quick/full size and setting, read by the notebooks and the CLI;
* :mod:`.cache` — where results go, cache keys, verified atomic entries, per-entry locks;
* :mod:`.sweep` — the sweep engine (:func:`~.sweep.execute` over local processes or a
  scheduler, :func:`~.sweep.cached_sweep` with resume and locks); its backends
  :mod:`.local_backend` and :mod:`.dask_backend`, its checks of who computes in :mod:`.identity`;
* :mod:`.reproduce` — one way to reproduce a part: check the output folders, compute, publish
  its figures and tables together.

The studies keep only their science and the definition of their sweeps.
"""

"""hrl-descheduler: the periodic high-level loop of hrl-scheduler (DESIGN.md sections 1, 2 and 5).

Modules: ``config`` (DeschedulerConfiguration), ``guards`` (every reason not to evict, the cycle ledger,
the eviction history), ``evict`` (the Evictor protocol, the dry-run evictor), ``loop`` (``run_once`` /
``run_forever``, ``CycleReport``), ``metrics`` (Prometheus), ``snapshot`` (cluster state from a
``kubectl get -o json`` file), ``__main__`` (the ``hrl-descheduler`` command). The planning policy itself
lives in :mod:`policy.highlevel`; this package never imports the extender.
"""

"""hrl-scheduler's policy layer: everything below the extender and the descheduler (DESIGN.md section 3).

Core modules: :mod:`.state` (domain types), :mod:`.observe` (Kubernetes JSON → state), :mod:`.index`,
:mod:`.features`, :mod:`.config`, :mod:`.bundle`, :mod:`.kube`. Packages: :mod:`.topology`, :mod:`.encoder`,
:mod:`.cache`, :mod:`.lowlevel`, :mod:`.highlevel` (served, numpy only); :mod:`.sim`, :mod:`.baselines`,
:mod:`.train` (torch), :mod:`.bench`, :mod:`.cli`.
"""

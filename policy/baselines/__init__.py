"""The baselines users run today, re-implemented for the simulator: kube-scheduler's default score plugins
(:mod:`.kube_default`, with :mod:`.affinity`), scheduler-plugins NetworkAware (:mod:`.networkaware`) and Trimaran
TargetLoadPacking (:mod:`.trimaran`), the upstream descheduler's LowNodeUtilization / RemoveDuplicates
(:mod:`.kube_descheduler`), the HPA (:mod:`.hpa`) and a tuned threshold autoscaler (:mod:`.threshold`).
"""

__all__ = ["affinity", "hpa", "kube_default", "kube_descheduler", "networkaware", "threshold", "trimaran"]

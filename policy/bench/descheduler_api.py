"""The descheduler's API requests per cycle on the real control plane (part 2 of ``make bench-descheduler``; see
:mod:`policy.bench.descheduler`).

``bench_api(nodes)``: ``hack/controlplane.py`` brings up etcd, kube-apiserver, kube-controller-manager, the
schedulers and kwok; ``nodes`` kwok nodes (16 CPU, 64 GiB, 250 pods, 3 zones) get ``pods_per_node`` pods each:
one ReplicaSet per service of the synthetic generator (:mod:`policy.bench.synthetic_cluster`, 10 replicas) and
its pods, created directly and bound to the generator's nodes while kube-controller-manager is paused
(SIGSTOP: no controller adds or deletes pods meanwhile), then resumed. Then, as the least-privilege
``hrl-descheduler`` identity, in dry run:

- CronJob mode: one ``hrl-descheduler --once``;
- interval mode: ``hrl-descheduler --interval`` (leader election off), its start-up and then ``--cycles``
  cycles.

Each is measured by the difference of kube-apiserver's ``apiserver_request_total`` (by verb, resource and
subresource) around it, for the resources the descheduler reads or writes, and cross-checked with the audit log
of its identity (the other components run too: the audit log is exact per identity, the metric is not).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .markdown import ROOT
from .synthetic_cluster import SyntheticCluster, synthetic_objects

__all__ = ["bench_api", "request_counts"]

USER = "hrl-descheduler"
RESOURCES = (
    "pods",
    "nodes",
    "poddisruptionbudgets",
    "deployments",
    "replicasets",
    "statefulsets",
    "persistentvolumes",
    "persistentvolumeclaims",
    "events",
    "horizontalpodautoscalers",
)
_SAMPLE = re.compile(r"^apiserver_request_total\{([^}]*)\} (\S+)$", re.M)


def _controlplane():
    name = "hrl_controlplane"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "hack" / "controlplane.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def request_counts(metrics_text: str) -> Counter:
    """``apiserver_request_total`` summed by ``(verb, resource[/subresource])`` for :data:`RESOURCES`."""
    out: Counter = Counter()
    for labels, value in _SAMPLE.findall(metrics_text):
        lab = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if lab.get("resource") not in RESOURCES:
            continue
        res = lab["resource"] + (f"/{lab['subresource']}" if lab.get("subresource") else "")
        out[(lab.get("verb", ""), res)] += float(value)
    return out


def _audit_counts(events: list[dict]) -> Counter:
    out: Counter = Counter()
    for e in events:
        ref = e.get("objectRef") or {}
        res = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        out[(str(e.get("verb", "")).upper(), res)] += 1
    return out


def _populate(cp, cpm, nodes: int, pods_per_node: int, workers: int = 8) -> int:
    from kubernetes import client as kclient
    from kubernetes import config as kconfig

    spec = SyntheticCluster(nodes=nodes, pods_per_node=pods_per_node)
    objs = list(synthetic_objects(spec))
    node_objs = [o for o in objs if o["kind"] == "Node"]
    cp.create_nodes(
        (
            cpm.fake_node(
                n["metadata"]["name"], cpu="16", memory="64Gi", pods=250, labels=dict(n["metadata"]["labels"])
            )
            for n in node_objs
        ),
        wait_s=1800,
    )
    for ns in sorted({o["metadata"]["namespace"] for o in objs if o["kind"] == "Pod"}):
        cp.kubectl("create", "namespace", ns, check=False)
    local = threading.local()

    def api():
        if not hasattr(local, "c"):
            local.c = kconfig.new_client_from_config(config_file=str(cp.kubeconfig))
        return local.c

    kcm = cp.component("kube-controller-manager")
    os.kill(kcm.pid, signal.SIGSTOP)
    try:
        by_rs: dict[str, list[dict]] = {}
        for o in objs:
            if o["kind"] == "Pod":
                ref = o["metadata"]["ownerReferences"][0]
                by_rs.setdefault(f"{o['metadata']['namespace']}/{ref['name']}", []).append(o)

        def make(item: tuple[str, list[dict]]) -> None:
            key, pods = item
            ns, name = key.split("/", 1)
            tmpl = pods[0]
            labels = dict(tmpl["metadata"]["labels"])
            rs = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "replicas": len(pods),
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels, "annotations": tmpl["metadata"].get("annotations") or {}},
                        "spec": {"containers": tmpl["spec"]["containers"]},
                    },
                },
            }
            apps = kclient.AppsV1Api(api())
            created = json.loads(apps.create_namespaced_replica_set(ns, rs, _preload_content=False).data)
            uid = created["metadata"]["uid"]
            core = kclient.CoreV1Api(api())
            for p in pods:
                meta = {k: v for k, v in p["metadata"].items() if k not in ("uid", "creationTimestamp", "namespace")}
                meta["ownerReferences"] = [{**meta["ownerReferences"][0], "uid": uid, "blockOwnerDeletion": True}]
                body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": p["spec"]}
                core.create_namespaced_pod(ns, body, _preload_content=False)

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(make, sorted(by_rs.items())))
    finally:
        os.kill(kcm.pid, signal.SIGCONT)
    return spec.pods


def _metrics(cp) -> Counter:
    return request_counts(cp.kubectl("get", "--raw", "/metrics").stdout)


def _diff(after: Counter, before: Counter) -> dict[str, int]:
    return {
        f"{v} {r}": int(round(after[(v, r)] - before.get((v, r), 0)))
        for v, r in sorted(after)
        if after[(v, r)] - before.get((v, r), 0) > 0
    }


def bench_api(nodes: int = 1000, pods_per_node: int = 30, cycles: int = 2, workdir: str | None = None) -> dict:
    """Run the measurement (see the module docstring); returns ``{"markdown", "cronjob", "interval", ...}``."""
    cpm = _controlplane()
    tmp = Path(workdir or tempfile.mkdtemp(prefix="hrl-bench-descheduler-api-"))
    cp = cpm.ControlPlane(tmp / "cp")
    cfg = tmp / "descheduler.json"
    cfg.write_text(
        json.dumps(
            {
                "apiVersion": "hrl-scheduler.io/v1alpha1",
                "kind": "DeschedulerConfiguration",
                "dryRun": True,
                "leaderElection": {"enabled": False},
            }
        )
    )
    out: dict[str, Any] = {"nodes": nodes}
    cp.up(extender=False)
    try:
        t0 = time.monotonic()
        out["pods"] = _populate(cp, cpm, nodes, pods_per_node)
        out["populate_s"] = round(time.monotonic() - t0, 1)
        kube = str(cp.kubeconfigs[USER])
        base = [sys.executable, "-m", "descheduler", "--dry-run", "--json", "--config", str(cfg), "--kubeconfig", kube]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        # CronJob mode
        a0, m0 = len(cp.audit_events(USER)), _metrics(cp)
        r = subprocess.run([*base, "--once"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800)
        if r.returncode != 0:
            raise RuntimeError(f"hrl-descheduler --once exited {r.returncode}: {r.stderr[-500:]}")
        m1 = _metrics(cp)
        report = json.loads(r.stdout.strip().splitlines()[-1])
        out["cronjob"] = {
            "metric": _diff(m1, m0),
            "audit": {f"{v} {res}": n for (v, res), n in sorted(_audit_counts(cp.audit_events(USER)[a0:]).items())},
            "moves_attempted": len(report["results"]),
            "reads": report.get("reads", {}),
        }
        # interval mode: start-up, then `cycles` cycles
        proc = subprocess.Popen(
            [*base, "--interval", "30"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT, env=env
        )
        try:
            assert proc.stdout is not None
            proc.stdout.readline()  # the first cycle (start-up: the lists, the watches)
            a1, m2 = len(cp.audit_events(USER)), _metrics(cp)
            reports = [json.loads(proc.stdout.readline()) for _ in range(cycles)]
            m3 = _metrics(cp)
            out["interval"] = {
                "cycles": cycles,
                "metric": _diff(m3, m2),
                "audit": {f"{v} {res}": n for (v, res), n in sorted(_audit_counts(cp.audit_events(USER)[a1:]).items())},
                "moves_attempted": [len(x["results"]) for x in reports],
            }
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    finally:
        cp.down()
    out["markdown"] = _markdown(out)
    return out


def _markdown(out: dict) -> str:
    c, i = out.get("cronjob", {}), out.get("interval", {})
    lines = [
        f"### API requests per cycle on the real control plane ({out['nodes']:,} kwok nodes, {out.get('pods', 0):,} "
        "pods)",
        "",
        "kube-apiserver's `apiserver_request_total` difference around one dry-run cycle (`hrl-descheduler --once`, "
        f"CronJob mode) and around {i.get('cycles', '?')} cycles of `--interval` after its start-up, for the "
        "resources the descheduler touches; in brackets the same from the audit log of its identity (other "
        "components run meanwhile: the audit log is exact per identity). Pods are listed in pages of 500. "
        f"Moves attempted: CronJob {c.get('moves_attempted', '?')}, interval {i.get('moves_attempted', '?')} "
        "(dry run: the guards and the targeted re-reads run, the eviction is not sent).",
        "",
        "| mode | requests (metric) | requests (audit, this identity) |",
        "|---|---|---|",
        f"| CronJob (`--once`) | {', '.join(f'{k}: {v}' for k, v in c.get('metric', {}).items()) or '-'} | "
        f"{', '.join(f'{k}: {v}' for k, v in c.get('audit', {}).items()) or '-'} |",
        f"| interval, per {i.get('cycles', '?')} cycles | "
        f"{', '.join(f'{k}: {v}' for k, v in i.get('metric', {}).items()) or '-'} | "
        f"{', '.join(f'{k}: {v}' for k, v in i.get('audit', {}).items()) or '-'} |",
    ]
    return "\n".join(lines)

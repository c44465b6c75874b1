#!/usr/bin/env python3
"""Regenerate the vendored simulator applications under policy/data/apps/ from the team's shared copies of
the upstream sources (``--shared DIR``, default ../shared/data) and the Alibaba test fixtures.

What it writes (each app's PROVENANCE.md explains the derivation in words):

- ``sock-shop/complete-demo.yaml``: the upstream file, unchanged except one
  ``hrl-scheduler.io/depends-on`` annotation inserted into each Deployment's metadata (text insertion;
  every other byte is the upstream one);
- ``dsb-hotel-reservation/kubernetes-manifests.yaml``: the upstream kompose Deployment and Service YAMLs
  concatenated (PersistentVolume/PVC files left out), with the annotation inserted the same way;
- ``dsb-social-network/`` and ``dsb-media-microservices/kubernetes-manifests.yaml``: plain Deployments
  written from each Helm sub-chart's values.yaml the way the chart's ``_baseDeployment.tpl`` renders them
  (name, ``service``/``app`` labels, replicas, image, command, ports, resources) — no Helm rendering;
- ``alibaba/``: a synthetic Deployment per service of the union of the three Alibaba sample call graphs in
  tests/fixtures/alibaba/expected, and ``services.csv`` mapping the short names to the trace's names.

The call graph of each app comes from the caller/callee table of its upstream PROVENANCE.md. Run it from
the repository root: ``python hack/vendor_apps.py [--shared ../shared/data]``; it is deterministic.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
APPS = ROOT / "policy" / "data" / "apps"
ANNOTATION = "hrl-scheduler.io/depends-on"


def edge_table(provenance: Path) -> list[tuple[str, str]]:
    """The (caller, callee) rows of the '## Call graph' table of an upstream PROVENANCE.md."""
    text = provenance.read_text(encoding="utf-8")
    sec = text[text.index("## Call graph") :]
    rows = []
    for line in sec.splitlines()[1:]:
        if line.startswith("## "):
            break
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or cells[0] in ("caller", "#") or set(cells[0]) <= {"-"}:
            continue
        if cells[0].isdigit():  # numbered tables: | # | caller | callee | evidence |
            cells = cells[1:]
        caller, callee = cells[0], cells[1]
        if caller.startswith("("):  # "(all 8 logic services) -> consul": registry, not a request path
            continue
        rows.append((caller, callee))
    return rows


def deps_of(edges: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        if b not in out[a]:
            out[a].append(b)
    return out


def annotate_deployments(text: str, deps: dict[str, list[str]]) -> str:
    """Insert the depends-on annotation into the top-level metadata of each Deployment document of a YAML
    stream, touching nothing else. Handles metadata with or without an existing ``annotations`` map."""
    docs = re.split(r"(?m)^---\s*$", text)
    out = []
    for doc in docs:
        obj = yaml.safe_load(doc) if doc.strip() else None
        if not isinstance(obj, dict) or obj.get("kind") != "Deployment":
            out.append(doc)
            continue
        name = obj["metadata"]["name"]
        if not deps.get(name):
            out.append(doc)
            continue
        value = ",".join(deps[name])
        lines = doc.split("\n")
        i = next(k for k, ln in enumerate(lines) if ln.rstrip() == "metadata:")
        indent = re.match(r"\s*", lines[i + 1]).group(0) or "  "
        if lines[i + 1].strip() == "annotations:":
            sub = re.match(r"\s*", lines[i + 2]).group(0)
            lines.insert(i + 2, f"{sub}{ANNOTATION}: {value}")
        else:
            lines.insert(i + 1, f"{indent}annotations:\n{indent}{indent}{ANNOTATION}: {value}")
        out.append("\n".join(lines))
    return "---".join(out)


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


# ---- sock shop ------------------------------------------------------------------------------------------


def sock_shop(shared: Path) -> None:
    src = shared / "sock-shop-manifests"
    edges = edge_table(src / "PROVENANCE.md")
    text = (src / "complete-demo.yaml").read_text(encoding="utf-8")
    out = APPS / "sock-shop" / "complete-demo.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(annotate_deployments(text, deps_of(edges)), encoding="utf-8")
    print(f"{out}: {len(edges)} edges; upstream sha256 {sha256(src / 'complete-demo.yaml')}")


# ---- DeathStarBench hotelReservation ----------------------------------------------------------------------


def hotel(shared: Path) -> None:
    src = shared / "deathstarbench-hotelreservation"
    edges = edge_table(src / "PROVENANCE.md")
    files = sorted(
        f for f in (src / "kubernetes").rglob("*.yaml") if f.name.endswith(("-deployment.yaml", "-service.yaml"))
    )
    parts = []
    for f in files:
        rel = f.relative_to(src)
        parts.append(f"# upstream hotelReservation/{rel}\n" + f.read_text(encoding="utf-8").strip("\n") + "\n")
    text = "---\n".join(parts)
    out = APPS / "dsb-hotel-reservation" / "kubernetes-manifests.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(annotate_deployments(text, deps_of(edges)), encoding="utf-8")
    print(f"{out}: {len(files)} files, {len(edges)} edges")


# ---- DeathStarBench Helm charts -------------------------------------------------------------------------


def helm_deployments(chart: Path, deps: dict[str, list[str]], default_resources: dict | None, header: str) -> str:
    """Plain Deployments as the chart's _baseDeployment.tpl / _baseNginxDeployment.tpl render them from
    each sub-chart's values.yaml and the umbrella chart's global values."""
    glob_vals = yaml.safe_load((chart / "values.yaml").read_text())["global"]
    docs = []
    for sub in sorted((chart / "charts").iterdir()):
        vf = sub / "values.yaml"
        if not vf.is_file():
            continue
        v = yaml.safe_load(vf.read_text()) or {}
        name = v.get("name") or sub.name
        c = v.get("container") or {}
        image = (
            f"{c.get('dockerRegistry') or glob_vals.get('dockerRegistry', 'docker.io')}/{c['image']}:"
            f"{c.get('imageVersion') or glob_vals.get('defaultImageVersion', 'latest')}"
        )
        container = {
            "name": c.get("name") or name,
            "image": image,
            "imagePullPolicy": c.get("imagePullPolicy") or glob_vals.get("imagePullPolicy", "IfNotPresent"),
            "ports": [
                {"containerPort": p["containerPort"], **({"protocol": p["protocol"]} if "protocol" in p else {})}
                for p in c.get("ports") or []
            ],
        }
        if c.get("command"):
            container["command"] = [c["command"]]
        if c.get("args"):
            container["args"] = list(c["args"])
        res = c.get("resources") or glob_vals.get("resources") or default_resources
        if res:
            container["resources"] = res
        meta = {"name": name, "labels": {"service": name}}
        if deps.get(name):
            meta["annotations"] = {ANNOTATION: ",".join(deps[name])}
        dep = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": v.get("replicas") or glob_vals.get("replicas", 1),
                "selector": {"matchLabels": {"service": name}},
                "template": {
                    "metadata": {"labels": {"service": name, "app": name}},
                    "spec": {"containers": [container], "restartPolicy": glob_vals.get("restartPolicy", "Always")},
                },
            },
        }
        docs.append(yaml.safe_dump(dep, sort_keys=False))
    return header + "---\n".join(docs)


def dsb_helm(shared: Path, folder: str, chart: str, app: str, default_resources: dict | None) -> None:
    src = shared / folder
    edges = edge_table(src / "PROVENANCE.md")
    chart_dir = src / "helm-chart" / chart
    header = (
        f"# Derived by hack/vendor_apps.py from DeathStarBench {chart_dir.relative_to(shared)} "
        "(values.yaml of the umbrella chart and of each sub-chart; no Helm rendering). See PROVENANCE.md.\n"
    )
    out = APPS / app / "kubernetes-manifests.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(helm_deployments(chart_dir, deps_of(edges), default_resources, header), encoding="utf-8")
    print(f"{out}: {len(edges)} edges")


# ---- Alibaba ------------------------------------------------------------------------------------------

ALIBABA_HEADER = """\
# Alibaba-derived large application (generated by hack/vendor_apps.py; do not edit by hand, edit the script).
# Services and call edges: the union of the three Alibaba microservice sample call graphs in
# tests/fixtures/alibaba/expected (v2021 x2, v2022); entries, call multiplicities and per-service parameters
# are derived from the sampled call counts and response times as PROVENANCE.md explains; resources are
# synthetic (every service 1 replica, requests 100m/128Mi, limits 500m/256Mi).
apiVersion: hrl-scheduler.io/v1alpha1
kind: App
name: alibaba
description: Alibaba-derived call graph (386 services, union of the v2021/v2022 samples), synthetic resources
manifests: kubernetes-manifests.yaml
graph: manifests
sloP95Ms: SLO_P95_MS
timeoutMs: 2000
defaults: {cpuMsPerRequest: 0.1, latencyP50Ms: 0.5, latencyMeanMs: 0.75, workingSetMi: 96}
"""
ALIBABA_SLO_P95_MS = 200

ALIBABA_REQUESTS = {"cpu": "100m", "memory": "128Mi"}
ALIBABA_LIMITS = {"cpu": "500m", "memory": "256Mi"}


def alibaba() -> None:
    """The union of the three sample call graphs (rows = sampled calls per edge); see PROVENANCE.md."""
    exp = ROOT / "tests" / "fixtures" / "alibaba" / "expected"
    rows: Counter = Counter()
    rt_sum: Counter = Counter()
    for f in sorted(exp.glob("derived_edges_*.csv")):
        for r in csv.DictReader(f.open(newline="")):
            k = (r["um"], r["dm"])
            rows[k] += int(r["rows"])
            rt_sum[k] += int(r["rows"]) * float(r["mean_abs_rt_ms"])
    names = sorted({a for a, _ in rows} | {b for _, b in rows})
    short = {}
    for n in names:
        if n == "USER":
            continue
        s = n.lower().replace("_", "-") if n.startswith("MS_") else "ms-" + n[:10]
        assert s not in short.values(), s
        short[n] = s
    into: Counter = Counter()
    out_rows: Counter = Counter()
    for (a, b), k in rows.items():
        if a != b:
            into[b] += k
            out_rows[a] += k
    # requests a service serves in the sample: calls into it; for roots (nobody calls them), the most
    # calls it made to one callee (each request makes at least that one call)
    served = {}
    for n in short:
        served[n] = into[n] or max((k for (a, b), k in rows.items() if a == n and b != n), default=1)
    app_dir = APPS / "alibaba"
    app_dir.mkdir(parents=True, exist_ok=True)
    deps: dict[str, list[str]] = defaultdict(list)
    edge_params = []
    for (a, b), k in sorted(rows.items()):
        if a == "USER" or b == "USER":
            continue
        deps[short[a]].append(short[b])
        m = min(5.0, max(0.05, k / served[a]))
        edge_params.append((short[a], short[b], round(m, 3)))
    # entries: USER's callees (v2022) and the roots of the other graphs, shares = their sampled requests
    entry: Counter = Counter()
    for (a, b), k in rows.items():
        if a == "USER" and b != "USER":
            entry[short[b]] += k
    for n in short:
        if into[n] == 0 and out_rows[n] > 0 and short[n] not in entry:
            entry[short[n]] += served[n]
    # per-service own time: rows-weighted mean |rt| of the calls into it (its response time seen by its
    # callers, which includes its callees), scaled by 0.3 for its own share; CPU 20 % of that
    svc_rt: dict[str, float] = {}
    for n in short:
        k = sum(c for (a, b), c in rows.items() if b == n and a != n)
        svc_rt[short[n]] = sum(rt_sum[(a, b)] for (a, b) in rows if b == n and a != n) / k if k else 1.0
    docs = []
    for n, s in sorted(short.items(), key=lambda kv: kv[1]):
        meta = {"name": s, "labels": {"app": s}, "annotations": {"hrl-scheduler.io/alibaba-name": n}}
        if deps.get(s):
            meta["annotations"][ANNOTATION] = ",".join(dict.fromkeys(deps[s]))
        docs.append(
            yaml.safe_dump(
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": meta,
                    "spec": {
                        "replicas": 1,
                        "selector": {"matchLabels": {"app": s}},
                        "template": {
                            "metadata": {"labels": {"app": s}},
                            "spec": {
                                "containers": [
                                    {
                                        "name": "main",
                                        "image": "registry.invalid/alibaba/ms:1",
                                        "resources": {"requests": ALIBABA_REQUESTS, "limits": ALIBABA_LIMITS},
                                    }
                                ]
                            },
                        },
                    },
                },
                sort_keys=False,
            )
        )
    (app_dir / "kubernetes-manifests.yaml").write_text(
        "# Synthetic Deployments for the union of the Alibaba sample call graphs (hack/vendor_apps.py); "
        "see PROVENANCE.md.\n" + "---\n".join(docs),
        encoding="utf-8",
    )
    with (app_dir / "services.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["service", "trace_name", "sampled_calls_in", "mean_abs_rt_in_ms"])
        for n, s in sorted(short.items(), key=lambda kv: kv[1]):
            w.writerow([s, n, into[n], round(svc_rt[s], 3)])
    # app.yaml: entries, edges, per-service parameters
    total = sum(entry.values())
    lines = [ALIBABA_HEADER.replace("SLO_P95_MS", str(ALIBABA_SLO_P95_MS)).rstrip("\n"), "entry:"]
    for s, k in sorted(entry.items()):
        lines.append(f"  {s}: {k / total:.5f}")
    lines.append("services:")
    for s in sorted(svc_rt):
        p50 = min(20.0, max(0.05, 0.3 * svc_rt[s]))
        cpu = min(2.0, max(0.02, 0.2 * p50))
        lines.append(
            f"  {s}: {{cpuMsPerRequest: {cpu:.3f}, latencyP50Ms: {p50:.3f}, "
            f"latencyMeanMs: {1.5 * p50:.3f}, workingSetMi: 96}}"
        )
    lines.append("edges:")
    for a, b, m in edge_params:
        lines.append(f"  - {{caller: {a}, callee: {b}, callsPerRequest: {m}}}")
    (app_dir / "app.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"alibaba: {len(short)} services, {len(edge_params)} edges, {len(entry)} entries")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", default=str(ROOT.parent / "shared" / "data"))
    args = ap.parse_args(argv)
    shared = Path(args.shared)
    if not shared.is_dir():
        print(f"vendor_apps: {shared}: not a directory (the team's shared data)", file=sys.stderr)
        return 2
    sock_shop(shared)
    hotel(shared)
    dsb_helm(shared, "deathstarbench-socialnetwork", "socialnetwork", "dsb-social-network", None)
    # the mediaMicroservices chart sets no resources at all (every pod BestEffort); we use the sibling
    # socialNetwork chart's global.resources (documented in PROVENANCE.md)
    dsb_helm(
        shared,
        "deathstarbench-mediamicroservices",
        "mediamicroservices",
        "dsb-media-microservices",
        {"limits": {"cpu": "100m", "memory": "128Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}},
    )
    alibaba()
    return 0


if __name__ == "__main__":
    sys.exit(main())

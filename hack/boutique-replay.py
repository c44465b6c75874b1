#!/usr/bin/env python3
"""A running Online Boutique on the test control plane (kwok nodes have no real containers): the workloads, and the
telemetry a mesh and the kubelets would export for them, in a real Prometheus.

- ``up``: creates kwok nodes (``--nodes``), the namespace and Online Boutique's Deployments
  (``policy/data/apps/online-boutique/kubernetes-manifests.yaml``; ``--scheduler`` sets their ``schedulerName``),
  starts an exporter (a subprocess on a free 127.0.0.1 port) and a Prometheus scraping it every ``--scrape``
  (``hack/install-prometheus.sh`` finds or installs the binary), and waits until Prometheus has samples; it writes
  ``DIR/state.json`` and prints the Prometheus URL and the ``prometheus+istio://`` source for ``hrl-policy record``;
- ``down``: stops both and deletes the namespace (the nodes stay: ``--delete-nodes`` deletes them too);
- ``serve`` (what ``up`` runs): the exporter itself.

The exporter's series:

- Istio's ``istio_requests_total`` and ``istio_request_duration_milliseconds`` (and Linkerd's and the OpenTelemetry
  service graph's) replaying the Online Boutique span table of ``tests/fixtures/online-boutique-spans`` at
  ``--speed`` times its rate (``tests/integration/prom_exporter.py``, the real-Prometheus tests' exporter): real
  measured latencies, per edge, and for the requests entering the mesh (the root spans' durations);
- cAdvisor's ``container_cpu_usage_seconds_total`` and ``container_memory_working_set_bytes`` for every running pod
  of the namespace (listed from the API server every 2 s): CPU = the service's served request rate × its CPU per
  request (the TraStrainer Online Boutique measurements: ``policy/data/apps/online-boutique/app.yaml``) split evenly
  over its pods, memory = its working set. Counters start at 0 for a new pod and only grow.

Nothing here is part of the product: it stands in for the mesh and the kubelets of a real cluster, so that the
shadow-mode guide (docs/shadow-mode.md) and its test (tests/integration/test_controlplane_shadow.py) run end to end.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "policy" / "data" / "apps" / "online-boutique" / "kubernetes-manifests.yaml"
APP = ROOT / "policy" / "data" / "apps" / "online-boutique"


def _load(name: str, path: Path):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


#: tests/integration/prom_exporter.py: ReplayCollector, ReplayTable (the span replay)
prom_exporter = _load("hrl_prom_exporter", ROOT / "tests" / "integration" / "prom_exporter.py")


class PodUsageCollector:
    """cAdvisor-shaped CPU and memory of the running pods ``pods()`` returns (``[(namespace, pod, service)]``), from
    each service's served rate (``served_rps``: service → requests/s) and its CPU per request and working set."""

    def __init__(
        self,
        pods: Callable[[], Iterable[tuple[str, str, str]]],
        served_rps: dict[str, float],
        cpu_ms_per_request: dict[str, float],
        working_set_mi: dict[str, float],
        clock: Callable[[], float] = time.time,
    ):
        self.pods = pods
        self.served = served_rps
        self.cpu_ms = cpu_ms_per_request
        self.ws = working_set_mi
        self.clock = clock
        self._cpu_s: dict[tuple[str, str], float] = {}
        self._last: float | None = None
        self._lock = threading.Lock()

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        now = self.clock()
        current = list(self.pods())
        per_service: dict[str, int] = {}
        for _ns, _p, svc in current:
            per_service[svc] = per_service.get(svc, 0) + 1
        with self._lock:
            dt = 0.0 if self._last is None else max(0.0, now - self._last)
            self._last = now
            for ns, p, svc in current:
                cores = self.cpu_ms.get(svc, 0.05) / 1000.0 * self.served.get(svc, 0.0) / per_service[svc]
                self._cpu_s[(ns, p)] = self._cpu_s.get((ns, p), 0.0) + cores * dt
            labels = ["namespace", "pod", "container"]
            cpu = CounterMetricFamily(
                "container_cpu_usage_seconds", "CPU used, seconds (cAdvisor, replay).", labels=labels
            )
            mem = GaugeMetricFamily("container_memory_working_set_bytes", "Working set, bytes (replay).", labels=labels)
            for ns, p, svc in current:
                cpu.add_metric([ns, p, "server"], self._cpu_s[(ns, p)], timestamp=now)
                mem.add_metric([ns, p, "server"], self.ws.get(svc, 64.0) * 2**20, timestamp=now)
        yield cpu
        yield mem

    def describe(self):
        return []


class BoutiqueReplayCollector(prom_exporter.ReplayCollector):
    """The span replay (:class:`ReplayCollector`) plus the duration histogram of the requests entering the mesh
    (Istio's ``source_workload="unknown"``, as an ingress gateway reports them): the durations of the span table's
    root spans per entry service, so that the entry service has a recorded latency too."""

    def __init__(self, table, entry_latencies_ms: dict[str, list[float]], **kw: Any):
        super().__init__(table, **kw)
        self.entry = {
            s: prom_exporter.ReplayEdge("unknown", s, len(v), tuple(sorted(v))) for s, v in entry_latencies_ms.items()
        }

    def _istio(self, edges, entries):
        for fam in super()._istio(edges, entries):
            if fam.name == "istio_request_duration_milliseconds":
                for svc, n in entries:
                    e = self.entry.get(svc)
                    if e is not None:
                        lv = ["destination", "unknown", "unknown", svc, self.namespace, "200"]
                        buckets = self._buckets(e, prom_exporter.ISTIO_BUCKETS_MS, 1.0, n)
                        fam.add_metric(lv, buckets, e.mean_ms * n, timestamp=self._ts)
            yield fam


def entry_latencies(path: Path = prom_exporter.SPANS) -> dict[str, list[float]]:
    """The durations (ms) of the span table's entry visits (visits without a caller), per service."""
    from policy.topology.spans import read_span_table

    table = read_span_table(path)
    table.classify()
    out: dict[str, list[float]] = {}
    for key, caller in table.caller.items():
        if caller is None:
            s = table.spans[key]
            out.setdefault(s.service, []).append(s.duration_ms)
    return out


def served_rates(table, speed: float) -> dict[str, float]:
    """Requests/s each service of the replayed span table serves: its entry requests and its callers' calls."""
    out: dict[str, float] = {}
    for s, n in table.entry_requests.items():
        out[s] = out.get(s, 0.0) + speed * n / table.window_s
    for e in table.edges:
        out[e.callee] = out.get(e.callee, 0.0) + speed * e.calls / table.window_s
    return out


def boutique_params() -> tuple[dict[str, float], dict[str, float]]:
    """CPU per request (ms) and working set (MiB) per service, from the vendored Online Boutique app."""
    from policy.sim.app import load_app

    app = load_app(str(APP))
    return (
        {s: p.cpu_ms_per_request for s, p in app.params.items()},
        {s: p.working_set_mi for s, p in app.params.items()},
    )


def kube_pods(kubeconfig: str, namespace: str, every_s: float = 2.0) -> Callable[[], list[tuple[str, str, str]]]:
    """A function returning the running, bound pods of ``namespace`` (namespace, name, service), re-listed from the
    API server every ``every_s`` seconds in a daemon thread."""
    from kubernetes import client, config

    from policy.observe import parse_pod

    api = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    state: dict[str, list[tuple[str, str, str]]] = {"pods": []}

    def refresh() -> None:
        while True:
            try:
                resp = api.list_namespaced_pod(namespace, _preload_content=False, _request_timeout=10)
                out = []
                for o in json.loads(resp.data)["items"]:
                    o["kind"] = "Pod"
                    p = parse_pod(o)
                    if p.node_name and p.phase == "Running" and not p.terminating:
                        out.append((p.namespace, p.name, p.service))
                state["pods"] = out
            except Exception as exc:  # noqa: BLE001 - keep the last list; a stand-in exporter
                print(f"boutique-replay: listing pods: {exc}", file=sys.stderr)
            time.sleep(every_s)

    threading.Thread(target=refresh, daemon=True).start()
    return lambda: list(state["pods"])


def serve(port: int, namespace: str, speed: float, kubeconfig: str) -> None:
    from prometheus_client import CollectorRegistry

    table = prom_exporter.ReplayTable.from_spans()
    cpu, ws = boutique_params()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BoutiqueReplayCollector(table, entry_latencies(), speed=speed, namespace=namespace))
    registry.register(PodUsageCollector(kube_pods(kubeconfig, namespace), served_rates(table, speed), cpu, ws))
    from prometheus_client import start_http_server

    httpd, _t = start_http_server(port, "127.0.0.1", registry)
    print(f"http://127.0.0.1:{httpd.server_port}/metrics", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    httpd.shutdown()
    httpd.server_close()


# ---- up / down ---------------------------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prometheus_binary() -> str:
    p = subprocess.run([str(ROOT / "hack" / "install-prometheus.sh")], capture_output=True, text=True, timeout=900)
    if p.returncode != 0 or not p.stdout.strip():
        raise SystemExit(f"boutique-replay: no Prometheus binary (hack/install-prometheus.sh): {p.stderr[-500:]}")
    return p.stdout.strip().splitlines()[-1]


def start_prometheus(binary: str, workdir: Path, target: str, scrape: str) -> tuple[subprocess.Popen, str]:
    """Prometheus on a free 127.0.0.1 port scraping ``target`` every ``scrape`` (honouring the exporter's
    timestamps); returns the process and its URL once ready."""
    port = _free_port()
    cfg = workdir / "prometheus.yml"
    cfg.write_text(
        f"global:\n  scrape_interval: {scrape}\nscrape_configs:\n  - job_name: boutique\n    honor_labels: true\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    log = open(workdir / "prometheus.log", "ab")
    proc = subprocess.Popen(
        [binary, f"--config.file={cfg}", f"--storage.tsdb.path={workdir / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1d", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"boutique-replay: prometheus exited ({workdir / 'prometheus.log'})")
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.2)
    proc.terminate()
    raise SystemExit("boutique-replay: prometheus not ready within 60 s")


def wait_for_samples(url: str, query: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    q = urllib.parse.urlencode({"query": query})
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5) as r:
                if json.loads(r.read())["data"]["result"]:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"boutique-replay: Prometheus has no samples of {query} within {timeout_s:g} s")


def deployments(namespace: str, scheduler: str) -> list[dict[str, Any]]:
    from policy.observe import load_objects

    out = []
    for o in load_objects(MANIFESTS):
        if o.get("kind") != "Deployment":
            continue
        d = json.loads(json.dumps(o))
        d["metadata"]["namespace"] = namespace
        d["spec"]["template"]["spec"]["schedulerName"] = scheduler
        d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 0
        out.append(d)
    return out


def _kubectl(kubeconfig: str, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cp = _load("hrl_controlplane", ROOT / "hack" / "controlplane.py")
    bin_dir = cp.resolve_bin_dir(build=False)
    return subprocess.run(
        [str(bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}", *args], input=input, text=True, capture_output=True,
        check=check, timeout=120,
    )  # fmt: skip


def up(args: argparse.Namespace) -> int:
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    cpm = _load("hrl_controlplane", ROOT / "hack" / "controlplane.py")
    if args.nodes:
        nodes = [cpm.fake_node(f"boutique-{i}", args.node_cpu, args.node_memory) for i in range(args.nodes)]
        _kubectl(
            args.kubeconfig, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes})
        )
    _kubectl(args.kubeconfig, "create", "namespace", args.namespace, check=False)
    items = deployments(args.namespace, args.scheduler)
    _kubectl(
        args.kubeconfig, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )
    port = _free_port()
    exporter = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "serve", f"--port={port}", f"--namespace={args.namespace}",
         f"--speed={args.speed}", f"--kubeconfig={args.kubeconfig}"],
        stdout=open(d / "exporter.log", "ab"), stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    prom_dir = Path(tempfile.mkdtemp(prefix="prometheus-", dir=d))
    proc, url = start_prometheus(prometheus_binary(), prom_dir, f"127.0.0.1:{port}", args.scrape)
    state = {"exporter_pid": exporter.pid, "prometheus_pid": proc.pid, "prometheus": url, "namespace": args.namespace,
             "kubeconfig": args.kubeconfig, "nodes": args.nodes}  # fmt: skip
    (d / "state.json").write_text(json.dumps(state, indent=2) + "\n")
    wait_for_samples(url, f'container_cpu_usage_seconds_total{{namespace="{args.namespace}"}}')
    host = url.removeprefix("http://")
    print(f"prometheus: {url}\nsource: prometheus+istio://{host}?namespace={args.namespace}\nstate: {d / 'state.json'}")
    return 0


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def down(args: argparse.Namespace) -> int:
    f = Path(args.dir) / "state.json"
    if not f.exists():
        print(f"boutique-replay: nothing to stop ({f} is missing)", file=sys.stderr)
        return 1
    st = json.loads(f.read_text())
    for k in ("prometheus_pid", "exporter_pid"):
        _stop(int(st[k]))
    _kubectl(st["kubeconfig"], "delete", "namespace", st["namespace"], "--wait=false", check=False)
    if args.delete_nodes and st.get("nodes"):
        _kubectl(st["kubeconfig"], "delete", "node", *[f"boutique-{i}" for i in range(int(st["nodes"]))], check=False)
    f.unlink()
    print("boutique-replay: stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="hack/boutique-replay.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="deploy Online Boutique and its telemetry")
    u.add_argument("--kubeconfig", required=True)
    u.add_argument("--namespace", default="boutique")
    u.add_argument("--scheduler", default="hrl-scheduler", help="the pods' schedulerName (default hrl-scheduler)")
    u.add_argument("--nodes", type=int, default=4, help="kwok nodes to create (0: none; default 4)")
    u.add_argument("--node-cpu", default="4")
    u.add_argument("--node-memory", default="16Gi")
    u.add_argument("--speed", type=float, default=20.0, help="replay speed of the span table (default 20)")
    u.add_argument("--scrape", default="5s", help="Prometheus scrape interval (default 5s)")
    u.add_argument("--dir", default=str(ROOT / "out" / "boutique"))
    dn = sub.add_parser("down", help="stop the telemetry, delete the namespace")
    dn.add_argument("--dir", default=str(ROOT / "out" / "boutique"))
    dn.add_argument("--delete-nodes", action="store_true")
    s = sub.add_parser("serve", help="run the exporter (what up starts)")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--namespace", required=True)
    s.add_argument("--speed", type=float, default=20.0)
    s.add_argument("--kubeconfig", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "serve":
        serve(args.port, args.namespace, args.speed, args.kubeconfig)
        return 0
    return up(args) if args.cmd == "up" else down(args)


if __name__ == "__main__":
    sys.exit(main())

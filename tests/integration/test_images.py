"""The images `make images` builds (hack/build-images.sh), run with podman on 127.0.0.1 as a Pod would run them:
read-only root filesystem, a tmpfs on /tmp, every capability dropped, no privilege escalation, the image's own
non-root user, host networking (so the container reaches the test control plane and the test reaches it):

- the extender image serves /livez, /readyz and a prioritize from a snapshot and the Online Boutique manifests, and
  answers exactly what `hrl-extender` from the source tree answers for the same inputs;
- the descheduler image prints its version and runs one dry-run cycle against the real control plane of
  tests/integration (the hrl-descheduler identity), observing every node and pod there;
- the embedding-cache image serves grpc.health.v1 SERVING and /metrics;
- each image runs as UID 65532, carries the OCI labels (created: the commit's time), has one fixed time on its
  layers and config (reproducible builds, warm or cold), no torch and no pip; out/images has its OCI archive with the
  manifest digest recorded.
- a rebuild without the layer cache (`hack/build-images.sh --check-reproducible`) of hrl-extender (the Python
  layers the three Python images share: the locked venv, the package's wheel, hash-based .pyc files) and of
  hrl-kube-scheduler (the Go binary on the base) gives the digests of the build before it, which came from the warm
  cache (typically an earlier commit's steps: what the labels of the commit must not leak into, see
  manifests/images/Dockerfile); run last, as it re-tags the images when it fails.

Without podman the module is skipped with the reason, except in CI (``CI`` or ``HRL_REQUIRE_IMAGES`` set, as
`.ci/run` does), where it fails: CI must build and run the images (`make test` installs the tools as root,
hack/install-image-tools.sh).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import httpx
import pytest
from cp_helpers import ROOT, wait_for
from proc_helpers import extender_process, free_port

from extender.wire import decode_host_priorities

FIX = ROOT / "tests" / "fixtures"
ARGS = (FIX / "extender" / "args-nodecachecapable.json").read_bytes()
NAMES = ["boutique-worker", "boutique-worker2", "boutique-worker3"]
OUT = ROOT / "out" / "images"
#: the numeric user of manifests/images/Dockerfile (the chart's runAsUser)
UID = 65532

# The image build can take minutes on a cold machine (the Debian base, the wheels): the module's own budget.
pytestmark = pytest.mark.timeout(1800)


def _required() -> bool:
    return bool(os.environ.get("CI") or os.environ.get("HRL_REQUIRE_IMAGES"))


@cache
def built() -> dict[str, dict]:
    """hack/build-images.sh (a no-op past the layer cache when nothing changed), then out/images/images.json."""
    if shutil.which("podman") is None:
        why = "podman is not installed (hack/install-image-tools.sh installs it, as root)"
        if _required():
            pytest.fail(f"{why}; CI must build and run the images", pytrace=False)
        pytest.skip(why)
    out = subprocess.run([str(ROOT / "hack" / "build-images.sh")], capture_output=True, text=True, timeout=1700)
    if out.returncode == 3 and not _required():
        pytest.skip(f"the image tools are missing: {out.stderr.strip().splitlines()[-1]}")
    assert out.returncode == 0, f"hack/build-images.sh failed:\n{out.stderr[-4000:]}"
    return json.loads((OUT / "images.json").read_text())


@pytest.fixture(scope="module")
def images() -> dict[str, dict]:
    return built()


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    out = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert out.returncode == 0, f"podman {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
    return out


#: How the chart runs every container (templates/_helpers.tpl: hrl.podSecurityContext, hrl.containerSecurityContext).
POD_LIKE = ("--network=host", "--read-only", "--tmpfs=/tmp:rw,size=64m", "--cap-drop=ALL",
            "--security-opt=no-new-privileges", "--pull=never")  # fmt: skip


def readable(tmp_path: Path, files: dict[str, bytes | str]) -> Path:
    """A directory the image's non-root user can read (pytest's tmp_path is 0700), holding ``files``."""
    d = tmp_path / f"mnt-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    for name, data in files.items():
        p = d / name
        p.write_bytes(data.encode() if isinstance(data, str) else data)
        p.chmod(0o644)
    d.chmod(0o755)
    return d


@contextmanager
def container(image: str, *args: str, mounts: dict[Path, str] | None = None) -> Iterator[str]:
    """``podman run -d`` of ``image`` with ``args``, removed (and its logs attached on failure) afterwards."""
    name = f"hrl-test-{uuid.uuid4().hex[:10]}"
    vols = [f"--volume={src}:{dst}:ro" for src, dst in (mounts or {}).items()]
    podman("run", "-d", f"--name={name}", *POD_LIKE, *vols, image, *args)
    try:
        yield name
    except BaseException:
        print(podman("logs", name, check=False).stderr[-4000:])
        raise
    finally:
        podman("rm", "-f", "-t", "5", name, check=False)


def wait_http(url: str, name: str, timeout_s: float = 60) -> httpx.Response:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return httpx.get(url, timeout=2)
        except httpx.TransportError:
            state = podman("inspect", "--format", "{{.State.Status}}", name, check=False).stdout.strip()
            assert state == "running", f"the container exited ({state}):\n{podman('logs', name, check=False).stderr}"
            assert time.monotonic() < deadline, f"{url} did not answer within {timeout_s} s"
            time.sleep(0.2)


def extender_config(port: int) -> str:
    return (
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: ExtenderConfiguration\n"
        f"listen: {{host: 127.0.0.1, port: {port}}}\nlogLevel: INFO\n"
        "topology: {sources: [/etc/hrl-boutique]}\n"
    )


def test_the_extender_image_answers_livez_readyz_and_a_prioritize_as_the_source_tree_does(images, tmp_path):
    port = free_port()
    mnt = readable(
        tmp_path,
        {"config.yaml": extender_config(port), "cluster.json": (FIX / "extender" / "cluster-list.json").read_bytes()},
    )
    boutique = FIX / "online-boutique-manifests"
    with container(
        images["hrl-extender"]["image"],
        "--config", "/etc/hrl/config.yaml", "--snapshot", "/etc/hrl/cluster.json", "--log-format", "json",
        mounts={mnt: "/etc/hrl", boutique: "/etc/hrl-boutique"},
    ) as name:  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        assert wait_http(base + "/livez", name).status_code == 200
        assert httpx.get(base + "/readyz", timeout=5).status_code == 200
        r = httpx.post(base + "/scheduler/prioritize", content=ARGS, timeout=5)
        assert r.status_code == 200
        from_image = decode_host_priorities(r.content, NAMES)
        metrics = httpx.get(base + "/metrics", timeout=5).text
        logs = podman("logs", name).stderr
    assert 'hrl_extender_prioritize_total{outcome="ok"} 1.0' in metrics
    assert len(set(from_image.values())) > 1, from_image  # real scores, not the neutral answer
    # every log line is one JSON object (the chart's logFormat: json)
    assert logs.strip() and all(json.loads(line)["component"] == "hrl-extender" for line in logs.splitlines())
    # the same inputs through the source tree's hrl-extender give the same scores
    port2 = free_port()
    cfg = tmp_path / "host.yaml"
    cfg.write_text(extender_config(port2).replace("/etc/hrl-boutique", str(boutique)))
    with extender_process(cfg, port2, "--snapshot", str(FIX / "extender" / "cluster-list.json")) as ext:
        r = httpx.post(ext.base_url + "/scheduler/prioritize", content=ARGS, timeout=5)
        assert decode_host_priorities(r.content, NAMES) == from_image


@pytest.mark.controlplane
def test_the_descheduler_image_prints_its_version_and_runs_a_dry_run_cycle_against_the_control_plane(
    images, control_plane, kwok_nodes, namespace, tmp_path
):
    image = images["hrl-descheduler"]["image"]
    version = podman("run", "--rm", *POD_LIKE, image, "--version").stdout.strip()
    assert version.startswith("hrl-descheduler 0.1.0 (Python 3.11."), version
    kwok_nodes(2)
    control_plane.kubectl("create", "deployment", "web", "-n", namespace, "--image=registry.k8s.io/pause:3.10",
                          "--replicas=2")  # fmt: skip

    def running() -> bool:
        out = control_plane.kubectl("get", "pods", "-n", namespace, "--field-selector=status.phase=Running",
                                    "-o", "name").stdout  # fmt: skip
        return len(out.split()) == 2

    wait_for(running, 60, "the two web pods to run on kwok nodes")
    kubeconfig = control_plane.kubectl(
        "config", "view", "--flatten", "--minify", f"--kubeconfig={control_plane.kubeconfigs['hrl-descheduler']}"
    ).stdout
    cfg = "apiVersion: hrl-scheduler.io/v1alpha1\nkind: DeschedulerConfiguration\ndryRun: true\n"
    mnt = readable(tmp_path, {"config.yaml": cfg, "kubeconfig": kubeconfig})
    out = podman(
        "run", "--rm", *POD_LIKE, f"--volume={mnt}:/etc/hrl-descheduler:ro", image,
        "--config", "/etc/hrl-descheduler/config.yaml", "--kubeconfig", "/etc/hrl-descheduler/kubeconfig",
        "--once", "--json", "--log-format", "json", timeout=180,
    )  # fmt: skip
    report = json.loads(out.stdout)
    nodes = json.loads(control_plane.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    assert report["dry_run"] is True and report["nodes"] == len(nodes), report
    pods = json.loads(control_plane.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
    assert report["pods"] >= 2 and report["pods"] <= len(pods), report
    assert all(json.loads(line)["component"] == "hrl-descheduler" for line in out.stderr.splitlines() if line)


def test_the_embedding_cache_image_serves_grpc_health_and_metrics(images):
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    port, mport = free_port(), free_port()
    with container(
        images["hrl-embedding-cache"]["image"],
        "--log-format", "json", "cache", "serve", f"--listen=127.0.0.1:{port}", f"--metrics-listen=127.0.0.1:{mport}",
    ) as name:  # fmt: skip
        assert "grpc_server_started_total" in wait_http(f"http://127.0.0.1:{mport}/metrics", name).text
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            grpc.channel_ready_future(ch).result(timeout=30)
            reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_the_kube_scheduler_image_is_the_plugin_build_alone_non_root_and_labelled(images):
    info = images["hrl-kube-scheduler"]
    (meta,) = json.loads(podman("image", "inspect", info["image"]).stdout)
    assert meta["Config"]["User"] == f"{UID}:{UID}"
    assert meta["Config"]["Labels"]["org.opencontainers.image.title"] == "hrl-kube-scheduler"
    kube = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", (ROOT / "scheduler-plugin" / "go.mod").read_text(), re.M)[1]
    assert podman("run", "--rm", *POD_LIKE, info["image"], "--version").stdout.strip() == f"Kubernetes {kube}"
    # the Debian base and the static binary: none of the Python runtime stage
    probe = podman("run", "--rm", *POD_LIKE, "--entrypoint", "/bin/ls", info["image"], "/opt/hrl", check=False)
    assert probe.returncode != 0 and "No such file" in probe.stderr, probe


@pytest.mark.parametrize("name", ["hrl-extender", "hrl-descheduler", "hrl-embedding-cache"])
def test_each_image_is_non_root_labelled_reproducibly_dated_and_carries_no_torch_and_no_pip(images, name):
    info = images[name]
    (meta,) = json.loads(podman("image", "inspect", info["image"]).stdout)
    cfg = meta["Config"]
    assert cfg["User"] == f"{UID}:{UID}"
    epoch = int(subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"], capture_output=True,
                               text=True, check=True).stdout)  # fmt: skip
    labels = cfg["Labels"]
    assert labels["org.opencontainers.image.title"] == name
    version = re.search(r'^version = "(.*)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
    assert labels["org.opencontainers.image.version"] == version
    assert labels["org.opencontainers.image.created"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    # one fixed time for every layer and the config (podman build --timestamp): warm and cold builds agree
    fixed = int(re.search(r"^BASE_EPOCH=(\d+)", (ROOT / "hack" / "build-base.sh").read_text(), re.M)[1])
    assert meta["Created"].startswith(time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(fixed))), meta["Created"]
    assert (
        labels["org.opencontainers.image.revision"]
        == subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    probe = podman(
        "run", "--rm", *POD_LIKE, "--entrypoint", "/opt/hrl/bin/python", info["image"], "-c",
        "import importlib.util as u, os, sys; print(os.getuid(), u.find_spec('torch') is None, "
        "os.path.exists('/opt/hrl/bin/pip'), u.find_spec('pip') is None)",
    )  # fmt: skip
    assert probe.stdout.split() == [str(UID), "True", "False", "True"], probe.stdout
    # the OCI archive of out/images holds the same image, under the digest images.json records
    with tarfile.open(ROOT / info["archive"]) as tf:
        (manifest,) = json.load(tf.extractfile("index.json"))["manifests"]
        config_digest = json.load(tf.extractfile("blobs/sha256/" + manifest["digest"].split(":")[1]))["config"]
    assert manifest["digest"] == info["digest"] and config_digest["digest"] == info["id"] == "sha256:" + meta["Id"]


#: What the reproducibility check rebuilds without the layer cache (about 50 s on a 2-core machine: the shared runtime
#: stage's venv is the bulk of it; the other two Python images differ from hrl-extender only by metadata steps).
REBUILT = ("hrl-extender", "hrl-kube-scheduler")


def test_a_rebuild_without_the_layer_cache_gives_the_digests_of_the_warm_build(images):
    before = json.loads((OUT / "images.json").read_text())
    out = subprocess.run([str(ROOT / "hack" / "build-images.sh"), "--check-reproducible", *REBUILT],
                         capture_output=True, text=True, timeout=1700)  # fmt: skip
    assert out.returncode == 0, f"hack/build-images.sh --check-reproducible failed:\n{out.stderr[-4000:]}"
    assert "reproducible: the rebuild gave the same digests" in out.stderr
    after = json.loads((OUT / "images.json").read_text())
    for name in REBUILT:
        assert (after[name]["id"], after[name]["digest"]) == (before[name]["id"], before[name]["digest"]), name
        (meta,) = json.loads(podman("image", "inspect", after[name]["image"]).stdout)
        assert "sha256:" + meta["Id"] == before[name]["id"], name

"""The CronJob mode's metrics reach a real Prometheus Pushgateway (Debian's `prometheus-pushgateway`, installed
by hack/install-pushgateway.sh, started here on a free 127.0.0.1 port): one `hrl-descheduler --once` run with
`metrics.pushgateway` set pushes its counters, `hrl_build_info` and the process metrics under job
`hrl-descheduler`, and the next run replaces the group (the Pushgateway's PUT semantics); with a state file (the
chart's CronJob has one) the counters carry over, so the group holds cumulative totals under its grouping key."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from proc_helpers import free_port
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_until

from descheduler.__main__ import main

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "descheduler" / "cluster-list.json"


@pytest.fixture(scope="module")
def pushgateway(tmp_path_factory):
    out = subprocess.run([str(ROOT / "hack" / "install-pushgateway.sh")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    binary = out.stdout.strip().splitlines()[-1]
    port = free_port()
    log = tmp_path_factory.mktemp("pushgateway") / "pushgateway.log"
    with open(log, "w") as f:
        proc = subprocess.Popen([binary, f"--web.listen-address=127.0.0.1:{port}"], stdout=f, stderr=f)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError):
            return False

    try:
        wait_until(up, 30, 0.1, "the Pushgateway to be ready")
        yield url
    finally:
        proc.terminate()
        proc.wait(15)


def pushed(url: str, job: str = "hrl-descheduler") -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.labels.get("job") == job
    }


def value(samples, name: str, **labels: str) -> float:
    return sum(
        v for (n, ls), v in samples.items() if n == name and all(dict(ls).get(k) == x for k, x in labels.items())
    )


def run_once(tmp_path: Path, url: str, capsys, extra: str = "") -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: DeschedulerConfiguration\n"
        f"metrics: {{pushgateway: '{url}', job: hrl-descheduler}}\n" + extra
    )
    rc = main(["--config", str(cfg), "--once", "--snapshot", str(FIXTURE), "--dry-run", "--json"])
    err = capsys.readouterr().err
    assert rc == 0 and "could not export" not in err, err


def test_a_cronjob_run_pushes_its_metrics_and_the_next_run_replaces_them(pushgateway, tmp_path, capsys):
    run_once(tmp_path, pushgateway, capsys)
    first = pushed(pushgateway)
    assert value(first, "hrl_descheduler_cycles_total", result="ok") == 1
    assert value(first, "hrl_build_info", component="hrl-descheduler") == 1
    assert value(first, "process_resident_memory_bytes") > 0
    assert value(first, "push_time_seconds") > 0  # the Pushgateway's own record of the push
    dry = value(first, "hrl_descheduler_evictions_total", outcome="dry_run")
    run_once(tmp_path, pushgateway, capsys)
    second = pushed(pushgateway)
    # Each run is a fresh process: its group replaces the last one (counters from that run alone, not summed).
    assert value(second, "hrl_descheduler_cycles_total", result="ok") == 1
    assert value(second, "hrl_descheduler_evictions_total", outcome="dry_run") == dry
    assert value(second, "push_time_seconds") >= value(first, "push_time_seconds")


def test_with_a_state_file_the_counters_carry_over_so_the_group_holds_totals_across_runs(pushgateway, tmp_path, capsys):
    state = tmp_path / "history.json"
    metrics = f"{{pushgateway: '{pushgateway}', job: hrl-des-cj, groupingKey: {{namespace: hrl-system}}}}"
    extra = f"stateFile: {state}\nmetrics: {metrics}\n"
    cfg = tmp_path / "config.yaml"
    for run in (1, 2, 3):
        cfg.write_text("apiVersion: hrl-scheduler.io/v1alpha1\nkind: DeschedulerConfiguration\n" + extra)
        rc = main(["--config", str(cfg), "--once", "--snapshot", str(FIXTURE), "--dry-run", "--json"])
        err = capsys.readouterr().err
        assert rc == 0 and "could not export" not in err, err
        got = pushed(pushgateway, "hrl-des-cj")
        # 1, 2, 3: each push replaces the group with the totals of every run so far (a counter, as rate() expects)
        assert value(got, "hrl_descheduler_cycles_total", result="ok", namespace="hrl-system") == run
        assert value(got, "hrl_descheduler_cycle_duration_seconds_count") == 1  # histograms stay per run
    # the eviction history is left alone (a dry run); the counters live beside it
    assert not state.exists() and (tmp_path / "history.counters.json").exists()
    # a damaged counters file costs only the counters' continuity: a warning, and the run starts them at 0
    (tmp_path / "history.counters.json").write_text(
        json.dumps({"version": 1, "counters": {"hrl_descheduler_cycles_total": [[{"result": "ok"}, -5]]}})
    )
    rc = main(["--config", str(cfg), "--once", "--snapshot", str(FIXTURE), "--dry-run", "--json"])
    err = capsys.readouterr().err
    assert rc == 0 and "dropping the saved counters" in err and "history.counters.json" in err, err
    assert value(pushed(pushgateway, "hrl-des-cj"), "hrl_descheduler_cycles_total", result="ok") == 1


def test_an_unreachable_pushgateway_is_a_warning_not_a_failed_run(tmp_path, capsys):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: DeschedulerConfiguration\n"
        f"metrics: {{pushgateway: 'http://127.0.0.1:{free_port()}'}}\n"
    )
    rc = main(["--config", str(cfg), "--once", "--snapshot", str(FIXTURE), "--dry-run", "--json"])
    err = capsys.readouterr().err
    assert rc == 0 and "could not export metrics" in err and "WARNING" in err

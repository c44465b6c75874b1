"""The bench on a local Ray: a tiny matrix runs as Ray tasks, gives the same summary as running in-process, and
two runs of the same matrix write byte-identical summary.json files."""

import pytest

from policy.bench.runner import RaySession
from policy.bench.stacks import main


@pytest.fixture(scope="module")
def local_ray():
    import ray

    with RaySession(None, num_cpus=2) as session:
        assert ray.is_initialized()
        yield session
    assert not ray.is_initialized()


def tiny(out, *extra):
    return [
        "--quick",
        "--scenarios",
        "baseline-2026-11",
        "--apps",
        "online-boutique",
        "--traces",
        "nasa,bursty",
        "--policies",
        "default-kube-scheduler,default-kube-scheduler+hpa@target=0.6",
        "--seeds",
        "3",
        "--minutes",
        "2",
        "--no-sweep",
        "--out",
        str(out),
        *extra,
    ]


def test_a_tiny_matrix_on_a_local_ray_is_byte_identical_run_to_run_and_to_an_in_process_run(local_ray, tmp_path):
    import ray

    assert main(tiny(tmp_path / "a")) == 0
    assert ray.is_initialized()  # the command reused the session it found, and left it running
    assert main(tiny(tmp_path / "b")) == 0
    assert main(tiny(tmp_path / "c", "--no-ray")) == 0
    a = (tmp_path / "a" / "summary.json").read_bytes()
    assert a == (tmp_path / "b" / "summary.json").read_bytes()
    assert a == (tmp_path / "c" / "summary.json").read_bytes()
    assert b'"default-kube-scheduler+hpa@target=0.6"' in a


def test_scenario_cells_on_a_local_ray_give_the_same_bits_as_in_process(local_ray, tmp_path):
    # a topology network, a scenario of several apps, a learned stack with its counters and the oracle (forks in the
    # Ray task), as Ray tasks and here
    def args(out, *extra):
        return [
            "--quick",
            "--scenarios",
            "network-edge,shared-cluster",
            "--apps",
            "online-boutique",
            "--policies",
            "default-kube-scheduler,hrl-scheduler,lookahead-oracle@horizon=1,coordinate=0",
            "--seeds",
            "2",
            "--training-seeds",
            "0",
            "--minutes",
            "2",
            "--no-sweep",
            "--out",
            str(out),
            *extra,
        ]

    assert main(args(tmp_path / "ray")) == 0
    assert main(args(tmp_path / "here", "--no-ray")) == 0
    a = (tmp_path / "ray" / "summary.json").read_bytes()
    assert a == (tmp_path / "here" / "summary.json").read_bytes()
    assert b'"shared-cluster"' in a and b'"guardrail_stabilization"' in a and b'"oracle_rollouts"' in a


def test_an_interrupted_ray_run_resumes_from_its_journal(local_ray, tmp_path, capsys):
    assert main(tiny(tmp_path)) == 0
    first = (tmp_path / "summary.json").read_bytes()
    journal = tmp_path / "runs-quick.jsonl"
    lines = journal.read_text().splitlines()
    assert len(lines) == 12  # 2 traces x 2 stacks x 3 seeds
    journal.write_text("\n".join(lines[:5]) + "\n" + lines[5][:30])
    capsys.readouterr()
    assert main(tiny(tmp_path, "--resume")) == 0
    assert "resuming, 5 of 12 runs" in capsys.readouterr().err
    assert (tmp_path / "summary.json").read_bytes() == first


def test_ray_options_that_exclude_each_other_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="--no-ray and --ray-address"):
        main(tiny(tmp_path, "--no-ray", "--ray-address", "auto"))
    with pytest.raises(SystemExit, match="--jobs: must be >= 1"):
        main(tiny(tmp_path, "--jobs", "0"))

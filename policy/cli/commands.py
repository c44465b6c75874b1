"""Every ``hrl-policy`` subcommand, registered with :func:`policy.cli.core.subcommand`; bodies import what
they need inside the function."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict

from tabulate import tabulate

from policy.telemetry import say, showing_progress

from .core import PROG, arg, subcommand

__all__ = [
    "cmd_graph",
    "cmd_train",
    "cmd_train_encoder",
    "cmd_export_encoder",
    "cmd_train_drpc",
    "cmd_train_placement",
    "cmd_train_hierarchy",
    "cmd_train_dagger",
    "cmd_train_constant",
    "cmd_train_pessimism",
    "cmd_export_placement",
    "cmd_cache_serve",
    "cmd_cache_get",
    "cmd_cache_encode",
    "cmd_bundle_check",
    "cmd_features",
    "cmd_simulate",
    "cmd_app_build",
    "cmd_explain",
    "cmd_record",
    "cmd_whatif",
]


# ---- graph -------------------------------------------------------------------------------------------


@subcommand(
    "graph",
    "print the call graph derived from manifests, AppGroups, span tables, Alibaba call-graph CSV "
    "or live Prometheus metrics",
    [
        arg(
            "sources",
            nargs="+",
            metavar="SOURCE",
            help="a Kubernetes manifest file or directory, a scheduler-plugins AppGroup YAML, a span CSV file or "
            "directory (one table), an Alibaba MSCallGraph CSV, an edge list (CSV with caller,callee columns, or "
            "the JSON this command writes with --json; the kind is detected from the content), or a live "
            "URI prometheus+istio|linkerd|otel://HOST:PORT[?window=5m&namespace=NS]",
        ),
        arg(
            "--json",
            action="store_true",
            help='print only {"services": [...], "edges": [{"caller", "callee", "rps", ...}]} on stdout',
        ),
        arg(
            "--format",
            choices=("manifests", "spans", "alibaba", "appgroup", "edges"),
            default=None,
            help="force the kind of every SOURCE path instead of detecting it",
        ),
        arg(
            "--span-column",
            action="append",
            default=[],
            metavar="ROLE=HEADER",
            help="the header of a span-table column whose name differs from the default, e.g. "
            "trace_id=traceId or service=service.name (roles: docs/bring-your-own-app.md); repeatable",
        ),
        arg(
            "--appgroup",
            metavar="NAME",
            default=None,
            help="print the graph as a scheduler-plugins AppGroup named NAME (YAML) for the NetworkAware plugins",
        ),
        arg("--namespace", default="default", help="with --appgroup: the AppGroup's and workloads' namespace"),
        arg(
            "--max-network-cost",
            type=int,
            default=None,
            metavar="N",
            help="with --appgroup: maxNetworkCost (0..10000) on every dependency (default: not written)",
        ),
        arg(
            "--min-bandwidth",
            default=None,
            metavar="QUANTITY",
            help="with --appgroup: minBandwidth (e.g. 100Mi) on every dependency (default: not written)",
        ),
        arg(
            "--sorting-algorithm",
            default="KahnSort",
            help="with --appgroup: spec.topologySortingAlgorithm (KahnSort, TarjanSort, ReverseKahn, ReverseTarjan, "
            "AlternateKahn, AlternateTarjan)",
        ),
    ],
)
def cmd_graph(args: argparse.Namespace) -> int:
    """``hrl-policy graph SOURCE... [--json] [--format KIND]``: warnings go to stderr, the graph to stdout
    (JSON from :meth:`ServiceGraph.to_json`, or a table). Bad input raises ``TopologyError`` (exit 2)."""
    from policy.topology.sources import load_graph

    from .columns import parse_span_columns

    graph, warnings = load_graph(args.sources, args.format, parse_span_columns(args.span_column))
    for w in warnings:
        say(f"{PROG} graph: warning: {w}", prog=PROG)
    if args.appgroup is not None:
        from policy.topology.appgroup import appgroup_from_graph, dump_appgroup
        from policy.topology.sources import workload_refs_from_sources

        obj = appgroup_from_graph(
            graph,
            args.appgroup,
            args.namespace,
            workloads=workload_refs_from_sources(args.sources),
            topology_sorting_algorithm=args.sorting_algorithm,
            max_network_cost=args.max_network_cost,
            min_bandwidth=args.min_bandwidth,
        )
        sys.stdout.write(dump_appgroup(obj))
        return 0
    if args.json:
        json.dump(graph.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0

    def num(v: float | None, digits: int) -> str:
        return "" if v is None else f"{v:.{digits}f}"

    rows = [
        [
            e.caller,
            e.callee,
            num(e.rps, 3),
            num(e.calls_per_request, 2),
            num(e.latency_mean_ms, 2),
            num(e.latency_p50_ms, 2),
            num(e.latency_p95_ms, 2),
            num(e.latency_p99_ms, 2),
            "" if e.error_rate is None else f"{100 * e.error_rate:.1f}",
        ]
        for e in graph.edges
    ]
    print(
        tabulate(
            rows,
            headers=["caller", "callee", "rps", "calls/req", "mean ms", "p50 ms", "p95 ms", "p99 ms", "errors %"],
            disable_numparse=True,
        )
    )
    connected = {e.caller for e in graph.edges} | {e.callee for e in graph.edges}
    isolated = [s for s in graph.services if s not in connected]
    print(
        f"\n{len(graph.services)} services, {len(graph.edges)} edges"
        + (f"; without edges: {', '.join(isolated)}" if isolated else "")
    )
    return 0


# ---- graph encoder and embedding cache (bodies in policy/train/encoder.py, policy/cli/cache.py) ---------


#: ``--app DIR`` / ``--scenario NAME`` of the training commands (policy.train.episodes.TrainingTarget).
APP_ARG = arg(
    "--app",
    action="append",
    default=None,
    metavar="DIR",
    help="train on this app (the folder 'hrl-policy app build' wrote, an app.yaml, or a built-in name; "
    "repeat for several) instead of the training apps; bundles default to out/train/<app>/bundles",
)
SCENARIO_ARG = arg(
    "--scenario",
    default=None,
    metavar="NAME|FILE",
    help="with --app: run the high level's training episodes in this scenario (policy/data/scenarios or a "
    "file) with the app in it; default: the benchmark's scenario families and the classic setting",
)
#: ``--tensorboard DIR`` of the training commands (policy/train/tensorboard.py).
TENSORBOARD_ARG = arg(
    "--tensorboard",
    default=None,
    metavar="DIR",
    help="also write the training curves as TensorBoard event files under DIR (tensorboard --logdir DIR); "
    "needs the [tensorboard] extra",
)


@subcommand(
    "train",
    "train the learned stacks: with --all, every stage in order (encoder, drpc, placement, constant, dagger) "
    "and every stack's bundles under policy/bundles/<stack>/ (make train)",
    [
        arg(
            "--all",
            action="store_true",
            help="run every stage (policy/train/pipeline.py); else name a stage subcommand",
        ),
        arg(
            "--out",
            default=None,
            help="bundles root (default: policy/bundles; with --quick: out/train/bundles); "
            "written only when every stage succeeded",
        ),
        arg("--quick", action="store_true", help="tiny stages for smoke tests (seconds to minutes)"),
        arg("--seed", type=int, default=0, help="seed of every stage"),
        arg(
            "--stages",
            default=None,
            help="comma-separated subset of: encoder,drpc,placement,constant,dagger (order is fixed; with "
            "--fine-tune: of drpc,placement,constant,dagger, the default)",
        ),
        arg(
            "--report",
            default=None,
            metavar="DIR",
            help="where training.json/.csv go (default: benchmarks/ for a full run, else out/train)",
        ),
        APP_ARG,
        SCENARIO_ARG,
        arg(
            "--fine-tune",
            nargs="?",
            const="",
            default=None,
            metavar="ROOT",
            help="with --app: start every stage from the trained bundles under ROOT (default: the committed "
            "policy/bundles) instead of a fresh start, their input normalization kept, with a smaller budget; "
            "the encoder is copied, not trained; a bundle the stage could not start from is refused before "
            "anything trains (docs/bring-your-own-app.md)",
        ),
        TENSORBOARD_ARG,
    ],
)
def cmd_train(args: argparse.Namespace) -> int:
    from .train import cmd_train as run  # lazy: the stages import torch themselves

    with showing_progress():  # a bar on a terminal, else progress records (JSON with --log-format json)
        return run(args)


@subcommand(
    "train encoder",
    "pre-train the graph encoder (torch) and write its bundle",
    [
        arg(
            "--out",
            default=None,
            help="bundle directory (default: policy/bundles/encoder; with --quick: runs/encoder-quick/bundle)",
        ),
        arg("--quick", action="store_true", help="a tiny run for smoke tests (seconds)"),
        arg("--seed", type=int, default=0, help="seed of data generation and training"),
        arg("--epochs", type=int, default=None, help="override the number of epochs"),
        arg("--layers", type=int, default=None, help="message-passing rounds (0 = no graph, an ablation)"),
        arg("--checkpoint", metavar="PATH", default=None, help="also save the torch checkpoint here"),
        arg("--ablation", action="store_true", help="also train a no-message-passing twin and report its error"),
        arg("--json", metavar="PATH", default=None, help="write the training report (held-out errors) as JSON"),
    ],
)
def cmd_train_encoder(args: argparse.Namespace) -> int:
    from policy.train.encoder import run_cli  # lazy: torch

    with showing_progress():  # a bar on a terminal, else progress records (JSON with --log-format json)
        return run_cli(
            args.out,
            args.quick,
            args.seed,
            args.epochs,
            args.layers,
            args.json,
            checkpoint=args.checkpoint,
            ablation=args.ablation,
        )


@subcommand(
    "export encoder",
    "write an encoder bundle from a torch checkpoint of 'train encoder'",
    [
        arg("checkpoint", metavar="CHECKPOINT", help="the .pt file written by 'train encoder --checkpoint'"),
        arg("--out", required=True, help="bundle directory to write"),
    ],
)
def cmd_export_encoder(args: argparse.Namespace) -> int:
    from policy.train.encoder import export_checkpoint  # lazy: torch

    b = export_checkpoint(args.checkpoint, args.out)
    say(f"{b.policy_version}: bundle written to {args.out}", logging.INFO, prog=PROG)
    return 0


@subcommand(
    "train drpc",
    "train the GRU workload predictor and the DRPC teacher + students (torch); write their bundles",
    [
        arg(
            "--students",
            default="drpc,hrl",
            help="comma-separated students: drpc (DRPC baseline), hrl (with graph "
            "embeddings), hrl-td3 (no teacher; the hrl-flat ablation)",
        ),
        arg("--minutes", type=int, default=None, help="simulated minutes of training (default 30000)"),
        arg("--seed", type=int, default=0, help="seed of episodes, exploration and torch"),
        arg(
            "--apps",
            default=None,
            help="comma-separated training apps (default online-boutique,sock-shop,dsb-hotel-reservation)",
        ),
        arg("--predictor", default=None, metavar="DIR", help="reuse this predictor bundle instead of training one"),
        arg(
            "--out",
            default=None,
            metavar="ROOT",
            help="bundles root (default policy/bundles: drpc/, "
            "hrl-scheduler/high/, hrl-flat/high/; with --quick: "
            "<run-dir>/bundles); written only at the end of a successful run",
        ),
        arg(
            "--run-dir",
            default=None,
            help="progress.csv, learning_curves.png, checkpoint.pt, report.json (default runs/drpc-s<seed>-<time>)",
        ),
        arg("--quick", action="store_true", help="a tiny run for smoke tests (seconds)"),
    ],
)
def cmd_train_drpc(args: argparse.Namespace) -> int:
    from policy.train.drpc import run_cli  # lazy: torch

    with showing_progress():  # a bar on a terminal, else progress records (JSON with --log-format json)
        return run_cli(
            args.students, args.minutes, args.seed, args.run_dir, args.out, args.apps, args.predictor, args.quick
        )


@subcommand(
    "train placement",
    "train the learned placement policy in the simulator (torch) and write its bundle",
    [
        arg(
            "--out",
            default=None,
            help="bundle directory (default: policy/bundles/<variant>/low; with --quick: "
            "runs/placement-<variant>-quick/bundle)",
        ),
        arg(
            "--run-dir",
            default=None,
            help="log.csv, learning_curves.png, checkpoint.pt, report.json (default: runs/placement-<variant>)",
        ),
        arg("--quick", action="store_true", help="a tiny run for smoke tests (seconds)"),
        arg("--seed", type=int, default=0, help="seed of instances, sampling and torch"),
        arg("--iterations", type=int, default=None, help="override the number of policy updates"),
        arg("--time-budget", type=float, default=None, metavar="SECONDS", help="stop training after this long"),
        arg(
            "--variant",
            choices=("hrl-scheduler", "hrl-no-encoder", "hrl-flat"),
            default="hrl-scheduler",
            help="which low-level bundle: hrl-scheduler (encoder embeddings, intent-conditioned), hrl-no-encoder (flat "
            "per-service features), hrl-flat (never sees an intent)",
        ),
        arg("--flat", action="store_true", help="shorthand for --variant hrl-no-encoder"),
        arg("--no-eval", action="store_true", help="skip the final comparison on train and held-out apps"),
        APP_ARG,
        TENSORBOARD_ARG,
    ],
)
def cmd_train_placement(args: argparse.Namespace) -> int:
    from policy.train.placement import run_cli  # lazy: torch

    with showing_progress():  # a bar on a terminal, else progress records (JSON with --log-format json)
        return run_cli(args)


@subcommand(
    "train hierarchy",
    "train the learned high level (PPO over the intent, the whole stack simulated underneath, rollouts on Ray) and "
    "write its bundle (intent/ + predictor/)",
    [
        arg(
            "--out",
            default=None,
            help="bundle directory (default: policy/bundles/<stack>/high; with --quick: "
            "runs/hierarchy-<stack>-quick/bundle)",
        ),
        arg("--run-dir", default=None, help="progress.csv, validation.csv, learning_curves.png, checkpoint.pt"),
        arg("--quick", action="store_true", help="a tiny run for smoke tests (seconds)"),
        arg("--seed", type=int, default=0, help="seed of episodes, exploration and torch"),
        arg("--iterations", type=int, default=None, help="PPO updates (default 45)"),
        arg("--episodes", type=int, default=None, help="episodes per update (default 16)"),
        arg("--minutes", type=int, default=None, help="simulated minutes per episode (default 60)"),
        arg("--workers", type=int, default=None, help="Ray CPUs of the local Ray (default 2)"),
        arg("--ray-address", default=None, help="a Ray cluster to run the episodes on (default: a local Ray)"),
        arg(
            "--scenario-share",
            type=float,
            default=None,
            help="share of episodes in the scenario families (default 0.5; the rest: one app with background load)",
        ),
        arg("--flat", action="store_true", help="train the hrl-no-encoder high level (no graph embeddings)"),
        arg(
            "--baseline",
            choices=("critic", "paired"),
            default=None,
            help="advantages from the critic (GAE, default) or from a paired run without exploration on the same "
            "episode inputs",
        ),
        arg("--init", default=None, help="an intent bundle to start from (fine-tune the distilled DAgger policy)"),
    ],
)
def cmd_train_hierarchy(args: argparse.Namespace) -> int:
    from policy.train.hierarchy import run_cli  # lazy: torch

    with showing_progress():  # a bar on a terminal, else progress records (JSON with --log-format json)
        return run_cli(args)


@subcommand(
    "train dagger",
    "distil the learned high level from the lookahead oracle (DAgger: the oracle labels the states the learner "
    "visits; the intent network imitates its best intent), rollouts on Ray, and write its bundle (intent/ + "
    "predictor/)",
    [
        arg(
            "--out", default=None, help="bundle directory (default: policy/bundles/<stack>/high; --quick: the run dir)"
        ),
        arg("--run-dir", default=None, help="progress.csv, learning_curve.png, labels.npz, report.json"),
        arg(
            "--loss",
            choices=("cost", "imitation", "critic"),
            default=None,
            help="cost: AggreVaTe's fit over every candidate's rollout cost (default); imitation: the best only; "
            "critic: imitate the intent a cost model fit on every candidate's rollout cost prefers",
        ),
        arg(
            "--random-candidates",
            type=int,
            default=None,
            help="random per-service intents the oracle rolls out at every period besides its own (default 0)",
        ),
        arg(
            "--critic-margin",
            type=float,
            default=None,
            help="--loss critic: the predicted gain over the tuned constant (median stakes) below which the "
            "constant is kept (default 0.1)",
        ),
        arg(
            "--capacity-targets",
            default=None,
            help="the oracle's constant grid, comma-separated capacity targets (default 0.5,0.65,0.8,0.9)",
        ),
        arg("--eval-episodes", type=int, default=None, help="fixed validation episodes (default 6)"),
        arg("--synthetic-share", type=float, default=None, help="share of episodes on synthetic apps (default 0.4)"),
        arg(
            "--guaranteed-shares",
            default=None,
            help="comma-separated shares of Guaranteed services a synthetic app draws from (default: 0.3 for all)",
        ),
        arg(
            "--baseline-weight",
            type=float,
            default=None,
            help="pull toward the tuned constant intent at every state (default 1; 0: none)",
        ),
        arg(
            "--labels",
            action="append",
            default=None,
            metavar="LABELS_NPZ",
            help="refit on the labels.npz of earlier runs (repeat for several): no oracle rollouts",
        ),
        arg("--quick", action="store_true", help="a tiny run for smoke tests (a minute)"),
        arg("--seed", type=int, default=0, help="seed of episodes, the mixture and torch"),
        arg("--iterations", type=int, default=None, help="DAgger iterations (default 4)"),
        arg("--episodes", type=int, default=None, help="labelled episodes per iteration (default 8)"),
        arg("--minutes", type=int, default=None, help="simulated minutes per episode (default 30)"),
        arg("--horizon", type=int, default=None, help="the oracle's rollout horizon, simulated minutes (default 10)"),
        arg("--workers", type=int, default=None, help="Ray CPUs of the local Ray (default 2)"),
        arg("--ray-address", default=None, help="a Ray cluster to run the episodes on (default: a local Ray)"),
        arg(
            "--constant",
            default=None,
            help="the tuned constant intent (constant.json of 'train constant'; "
            "default: the stack's committed one) recorded as the fallback",
        ),
        arg("--flat", action="store_true", help="the hrl-no-encoder high level (no graph embeddings)"),
        APP_ARG,
        SCENARIO_ARG,
        TENSORBOARD_ARG,
    ],
)
def cmd_train_dagger(args: argparse.Namespace) -> int:
    from policy.train.dagger import run_cli  # lazy: torch

    with showing_progress():  # a bar on a terminal, else progress records (JSON with --log-format json)
        return run_cli(args)


@subcommand(
    "train constant",
    "grid-search the best constant intent (capacity target, move budget) of hrl-scheduler on training episodes "
    "and write constant.json (the bar the learned high level must beat, and its fallback)",
    [
        arg("--out", default=None, help="file to write (default: policy/bundles/hrl-scheduler/high/constant.json)"),
        arg("--episodes", type=int, default=None, help="training episodes per grid point (default 36)"),
        arg("--minutes", type=int, default=None, help="simulated minutes per episode (default 30)"),
        arg("--workers", type=int, default=None, help="Ray CPUs of the local Ray (default 2)"),
        arg("--ray-address", default=None, help="a Ray cluster to run the episodes on (default: a local Ray)"),
        arg("--seed", type=int, default=0, help="seed of the episodes"),
        arg("--quick", action="store_true", help="a tiny search for smoke tests"),
    ],
)
def cmd_train_constant(args: argparse.Namespace) -> int:
    from policy.train.constant import run_cli  # lazy: Ray

    with showing_progress():  # a bar on a terminal, else progress records (JSON with --log-format json)
        return run_cli(args)


def _pessimism_values(v: str) -> list[float]:
    try:
        out = [float(x) for x in v.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {v!r}") from None
    if not out or any(not 0.0 <= x <= 100.0 for x in out):  # nan fails too; each knob's range is checked after
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers in [0, 100], got {v!r}")
    return out


@subcommand(
    "train pessimism",
    "grid-search the committed intent ensemble's (policy/bundles/hrl-ensemble) pessimism (each service's capacity "
    "target between the members' mean and their lowest) on training episodes and write pessimism.json beside its "
    "ensemble.json",
    [
        arg(
            "--out",
            default=None,
            help="file to write (default with --knob pessimism: policy/bundles/hrl-ensemble/high/pessimism.json; "
            "with the other knobs: none, the grid is printed)",
        ),
        arg(
            "--knob",
            choices=("pessimism", "weight", "forecast_min", "entry_forecast", "burst", "limit_target"),
            default="pessimism",
            help="the hrl-ensemble knob to sweep: pessimism (default), or, for research (nothing served reads the "
            "result), weight (the extender's weight in the scheduler profile, integers 1-100), forecast_min (the "
            "replica targets' lowest forecast factor, 0.5-1), entry_forecast (0/1: entry services' replica targets "
            "forecast from their measured arrivals), burst (the share of a Burstable pod's room its replica target "
            "counts, 0-1) or limit_target (each pod planned for at least this share of the CPU it can reach, 0-0.9)",
        ),
        arg(
            "--values",
            type=_pessimism_values,
            default=None,
            help="comma-separated values (pessimism in [0, 1], default 0,0.25,0.5,0.75,1; weight 1-100, default "
            "2,5,10; forecast_min in [0.5, 1], default 0.5,1; entry_forecast 0 or 1, default 0,1; burst in [0, 1], "
            "default 0,0.25,0.5,1; limit_target in [0, 0.9], default 0,0.2,0.3)",
        ),
        arg("--episodes", type=int, default=None, help="training episodes per value (default 36)"),
        arg("--minutes", type=int, default=None, help="simulated minutes per episode (default 30)"),
        arg("--workers", type=int, default=None, help="Ray CPUs of the local Ray (default 2)"),
        arg("--ray-address", default=None, help="a Ray cluster to run the episodes on (default: a local Ray)"),
        arg("--seed", type=int, default=0, help="seed of the episodes (the same draw as 'train constant')"),
        arg("--quick", action="store_true", help="a tiny search for smoke tests"),
    ],
)
def cmd_train_pessimism(args: argparse.Namespace) -> int:
    from policy.train.pessimism import run_cli  # lazy: Ray

    with showing_progress():  # a bar on a terminal, else progress records (JSON with --log-format json)
        return run_cli(args)


@subcommand(
    "export placement",
    "write a placement bundle from a checkpoint of 'train placement'",
    [
        arg("checkpoint", metavar="CHECKPOINT", help="the checkpoint.pt in the run directory of 'train placement'"),
        arg("--out", required=True, help="bundle directory to write"),
    ],
)
def cmd_export_placement(args: argparse.Namespace) -> int:
    from policy.train.placement import export_checkpoint  # lazy: torch

    b = export_checkpoint(args.checkpoint, args.out)
    say(f"{b.policy_version}: bundle written to {args.out}", logging.INFO, prog=PROG)
    return 0


@subcommand(
    "cache serve",
    "serve the gRPC topology embedding cache (starts empty; grpc.health.v1)",
    [
        arg(
            "--listen",
            default="127.0.0.1:50051",
            metavar="HOST:PORT",
            help="gRPC address to bind (default 127.0.0.1:50051; 0.0.0.0:50051 in a Pod; port 0 = any)",
        ),
        arg("--metrics-listen", default=None, metavar="HOST:PORT", help="serve Prometheus /metrics here"),
        arg("--max-entries", type=int, default=64, help="graph fingerprints kept (least recently stored dropped)"),
        arg(
            "--max-watchers",
            type=int,
            default=4,
            help="score-table watch streams served at once (the HRLScore plugins), 1..7 (each holds a thread)",
        ),
        arg("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR")),
    ],
)
def cmd_cache_serve(args: argparse.Namespace) -> int:
    from .cache import serve

    return serve(args)


@subcommand(
    "cache get",
    "print what an embedding cache holds for a fingerprint (or its intent)",
    [
        arg("--address", default="127.0.0.1:50051", metavar="HOST:PORT", help="the cache's gRPC address"),
        arg("--fingerprint", default="", help="graph fingerprint (default: the most recently stored entry)"),
        arg("--intent", action="store_true", help="print the intent instead of embeddings"),
        arg("--timeout", type=float, default=2.0, help="seconds per call (default 2)"),
        arg("--json", action="store_true", help="print JSON (with the matrix) on stdout"),
    ],
)
def cmd_cache_get(args: argparse.Namespace) -> int:
    from .cache import get

    return get(args)


@subcommand(
    "cache encode",
    "encode a call graph with the encoder bundle (and store it in a cache)",
    [
        arg("sources", nargs="+", metavar="SOURCE", help="as for 'hrl-policy graph'"),
        arg("--format", default=None, help="force the kind of every SOURCE (as for 'hrl-policy graph')"),
        arg("--bundle", default=None, help="encoder bundle directory (default: policy/bundles/encoder)"),
        arg("--address", default=None, metavar="HOST:PORT", help="store the embeddings in this cache"),
        arg("--timeout", type=float, default=5.0, help="seconds per cache call (default 5)"),
        arg("--json", action="store_true", help="print JSON on stdout"),
    ],
)
def cmd_cache_encode(args: argparse.Namespace) -> int:
    from .cache import encode

    return encode(args)


@subcommand(
    "bundle check",
    "check a policy bundle with the loaders the extender and descheduler run (exit 2 if they would refuse it)",
    [
        arg(
            "dir",
            metavar="DIR",
            help="bundle directory (low or encoder: manifest.json; high: student/ + predictor/), or an ensemble "
            "of bundles (ensemble.json)",
        ),
        arg(
            "--level",
            choices=("low", "high", "encoder"),
            default=None,
            help="the level to check it as (default: the one its manifest declares)",
        ),
    ],
)
def cmd_bundle_check(args: argparse.Namespace) -> int:
    """``hrl-policy bundle check``: see :mod:`policy.cli.bundle`."""
    from .bundle import run

    return run(args)


# ---- features -----------------------------------------------------------------------------------------


@subcommand(
    "features",
    "print the feature contract: every input of every learned network, its live and simulator source, its unit "
    "and what is used when it is missing",
    [
        arg("--network", choices=("placement", "drpc-student", "intent", "forecast", "encoder"), help="one network"),
        arg("--json", action="store_true", help="print the entries as one JSON list on stdout"),
        arg("--markdown", action="store_true", help="print docs/feature-contract.md"),
    ],
)
def cmd_features(args: argparse.Namespace) -> int:
    """``hrl-policy features``: :data:`policy.contract.FEATURE_CONTRACT` as a table, JSON or markdown."""
    from policy.contract import FEATURE_CONTRACT, render_markdown

    if args.markdown:
        sys.stdout.write(render_markdown())
        return 0
    rows = [e for e in FEATURE_CONTRACT if args.network in (None, e.network)]
    if args.json:
        print(json.dumps([asdict(e) for e in rows], indent=1))
        return 0
    table = [[e.network, e.input, e.feature, e.unit, ", ".join(e.sources), e.when_missing] for e in rows]
    print(tabulate(table, headers=["network", "input", "feature", "unit", "sources", "when missing"], maxcolwidths=50))
    return 0


# ---- config -------------------------------------------------------------------------------------------


@subcommand(
    "config schema",
    "print the JSON Schema of a configuration kind (for editor validation)",
    [
        arg("kind", metavar="KIND", help="ExtenderConfiguration, DeschedulerConfiguration, App, ThresholdAutoscaler"),
        arg("--out", metavar="PATH", help="write the schema to PATH instead of stdout"),
    ],
)
def cmd_config_schema(args: argparse.Namespace) -> int:
    """``hrl-policy config schema``: see :mod:`policy.cli.config`."""
    from .config import run_schema

    return run_schema(args)


@subcommand(
    "config check",
    "check configuration files with the loader the components run (every problem, one line each)",
    [arg("files", metavar="FILE", nargs="+", help="configuration files (any registered kind)")],
)
def cmd_config_check(args: argparse.Namespace) -> int:
    """``hrl-policy config check``: see :mod:`policy.cli.config`."""
    from .config import run_check

    return run_check(args)


# ---- simulate ----------------------------------------------------------------------------------------


@subcommand(
    "simulate",
    "run one simulation: a scheduling stack in a scenario, or an app under a load trace",
    [
        arg(
            "--scenario",
            metavar="NAME|FILE",
            default=None,
            help="a built-in scenario (policy/data/scenarios) or a scenario YAML file; without it: the setting "
            "baseline-2026-11 with --app and --trace",
        ),
        arg(
            "--app",
            default=None,
            help="built-in app name or path to an app.yaml (or its folder); with --scenario: replaces the app of a "
            "one-app scenario",
        ),
        arg(
            "--trace",
            default=None,
            help="nasa, twitter, bursty, or a CSV of requests per minute; with --scenario: replaces its app's trace",
        ),
        arg("--policy", required=True, help="stack name (built-in or from the hrl_scheduler.stacks entry points)"),
        arg(
            "--nodes",
            type=int,
            default=None,
            help="number of nodes (default: the app's benchmark cluster; not for scenarios with node pools)",
        ),
        arg(
            "--minutes",
            type=int,
            default=None,
            help="simulated minutes from the window offset (default 30, or the scenario's minutes)",
        ),
        arg("--offset", type=int, default=0, metavar="MIN", help="start this many minutes into the trace window"),
        arg("--samples", type=int, default=None, metavar="N", help="user requests sampled per minute (default 2000)"),
        arg("--seed", type=int, default=0, help="random seed"),
        arg("--json", metavar="PATH", help="write one flat JSON object to PATH ('-' for stdout)"),
        arg(
            "--bundles",
            metavar="DIR",
            default=None,
            help="the learned stacks load their bundles from DIR, laid out like policy/bundles (e.g. "
            "out/train/<app>/bundles of 'hrl-policy train --app'; @tseed=N: DIR/seeds/N) instead of policy/bundles",
        ),
    ],
)
def cmd_simulate(args: argparse.Namespace) -> int:
    """``hrl-policy simulate``: see :mod:`policy.sim.run`."""
    from .simulate import cmd_simulate as run

    return run(args)


# ---- app build ---------------------------------------------------------------------------------------


@subcommand(
    "app build",
    "build a simulated app from your manifests, spans and metrics, calibrated, with its per-service fit error",
    [
        arg("--manifests", required=True, metavar="PATH", help="Kubernetes manifests (file or folder): workloads"),
        arg("--spans", required=True, metavar="PATH", help="span table: a CSV file or a folder of *.csv[.gz]"),
        arg("--metrics", default=None, metavar="PATH", help="per-minute metrics: a CSV file or a folder of *.csv[.gz]"),
        arg("-o", "--out", required=True, metavar="APPDIR", help="the app folder to write (app.yaml, manifests/, ...)"),
        arg(
            "--entry",
            default=None,
            metavar="SERVICE",
            help="entry service(s), 'web' or 'web=0.7,api=0.3' (default: from the spans' root spans)",
        ),  # fmt: skip
        arg("--name", default=None, help="the app's name (default: the folder's name)"),
        arg(
            "--span-column",
            action="append",
            default=[],
            metavar="ROLE=HEADER",
            help="a span column's header (roles: trace_id, span_id, parent_id, pod, service, start_ns, end_ns, "
            "duration_us, operation, status); repeatable",
        ),
        arg(
            "--metrics-column",
            action="append",
            default=[],
            metavar="ROLE=HEADER[*FACTOR]",
            help="a metrics column's header and factor to the role's unit (roles: time, pod, service, cpu_m, "
            "memory_mi, rps, success_pct, latency_p50_ms, latency_p95_ms, latency_p99_ms, pod_latency_p95_ms); "
            "repeatable",
        ),
        arg(
            "--latency-from",
            choices=("auto", "spans", "metrics"),
            default="auto",
            help="where each service's measured latency comes from (auto: its latency metrics when it has them, "
            "else its spans)",
        ),
        arg("--slo-p95-ms", type=float, default=None, help="the app's p95 SLO (default: 1.3x the entry's p95)"),
        arg("--timeout-ms", type=float, default=None, help="end-to-end timeout (default: 2x the entry's p99, >= 2 s)"),
        arg("--iterations", type=int, default=20, help="fixed-point iterations of the fit (default 20)"),
        arg("--seed", type=int, default=0, help="random seed of the fit"),
        arg("--skip-checks", action="store_true", help="skip the minute-by-minute and hold-out checks (faster)"),
        arg("--compare", default=None, metavar="APP", help="also compare with this app (name or path)"),
        arg("--force", action="store_true", help="replace APPDIR, an earlier build (app.yaml); never other folders"),
        arg("--json", action="store_true", help="print only the report as JSON on stdout (warnings on stderr)"),
    ],
)
def cmd_app_build(args: argparse.Namespace) -> int:
    """``hrl-policy app build``: see :mod:`policy.sim.appbuild`."""
    from .app import cmd_app_build as run

    return run(args)


# ---- shadow mode: explain, record, what-if (bodies in policy/cli/shadow.py) ---------------------------------


@subcommand(
    "explain",
    "explain the low level's scores for one pod against a cluster snapshot: every score as named contributions",
    [
        arg(
            "--snapshot",
            required=True,
            metavar="PATH",
            help="`kubectl get nodes,pods -A -o json` output (file or folder), or a recording directory "
            "(hrl-policy record; its first step, or RECORDING@STEP)",
        ),
        arg("--pod", required=True, metavar="NAMESPACE/NAME", help="the pod to explain (bound or pending)"),
        arg(
            "--graph",
            action="append",
            default=[],
            metavar="SOURCE",
            help="call-graph source(s), as hrl-policy graph takes them (default: the recording step's graph, else "
            "the pods' hrl-scheduler.io/depends-on annotations); repeatable",
        ),
        arg("--policy", choices=("learned", "topology-heuristic"), default="learned", help="the low-level policy"),
        arg(
            "--bundle",
            default=None,
            metavar="DIR",
            help="learned: the bundle or ensemble directory (default: the served policy/bundles/hrl-ensemble/low, "
            "whose scores are one term; a member, e.g. policy/bundles/hrl-scheduler/low, splits into factors)",
        ),
        arg("--target-utilization", type=float, default=0.7, help="topology-heuristic: its targetUtilization"),
        arg(
            "--intent",
            default=None,
            metavar="LOCALITY,BALANCE",
            help="the intent vector the pod is scored with (default: the intent's defaults, 1,1)",
        ),
        arg("--nodes", default=None, metavar="N1,N2,...", help="candidates (default: every node passing the filter)"),
        arg("--top", type=int, default=3, help="contributions shown per node (default 3)"),
        arg("--json", action="store_true", help="print only the explanation as JSON on stdout"),
    ],
)
def cmd_explain(args: argparse.Namespace) -> int:
    """``hrl-policy explain``: see :mod:`policy.lowlevel.explain`."""
    from .shadow import cmd_explain as run

    return run(args)


@subcommand(
    "record",
    "record a live cluster over a window (objects, pod use, rates, latency, call graph, shadow logs) for whatif",
    [
        arg("-o", "--out", required=True, metavar="DIR", help="the recording directory (docs/shadow-mode.md)"),
        arg("--window", default="10m", help="how long to record (e.g. 10m, 2h, 7d; default 10m)"),
        arg("--step", default="60s", help="one sample of every signal per step (default 60s; divides --window)"),
        arg(
            "--prometheus",
            default=None,
            metavar="URI",
            help="prometheus+istio|linkerd|otel://HOST:PORT[?namespace=NS] (the mesh's metrics and cAdvisor); "
            "without it only the cluster's objects are recorded",
        ),
        arg(
            "--namespace", action="append", default=[], help="record these namespaces' pods (default: all); repeatable"
        ),
        arg("--kubeconfig", default=None, help="kubeconfig (default: in-cluster, $KUBECONFIG, ~/.kube/config)"),
        arg("--lag", default="5s", help="wait after each step's end before reading Prometheus (default 5s)"),
        arg("--resume", action="store_true", help="continue the recording in DIR where it stopped"),
        arg("--extender-log", default=None, metavar="PATH", help="the extender's decision log to copy (decisions.log)"),
        arg(
            "--descheduler-log", default=None, metavar="PATH", help="the descheduler's shadow log to copy (shadow.log)"
        ),
        arg("--json", action="store_true", help="print only the final manifest as JSON on stdout"),
    ],
)
def cmd_record(args: argparse.Namespace) -> int:
    """``hrl-policy record``: see :mod:`policy.recording.recorder`."""
    from .shadow import cmd_record as run

    return run(args)


@subcommand(
    "whatif",
    "replay a recording with each stack and write the counterfactual report (Markdown, JSON, plots)",
    [
        arg("recording", metavar="RECORDING", help="a recording directory (hrl-policy record)"),
        arg(
            "--policy",
            action="append",
            default=[],
            metavar="STACK",
            help="a stack to compare with what happened (repeatable; default hrl-scheduler)",
        ),
        arg("-o", "--out", required=True, metavar="DIR", help="where the report goes (report.md, report.json, *.png)"),
        arg("--seeds", type=int, default=3, help="replays per stack, the same seeds for all (default 3)"),
        arg(
            "--start",
            choices=("recorded", "fresh"),
            default="recorded",
            help="recorded: every pod starts on its recorded node; fresh: each stack places every pod (default "
            "recorded)",
        ),
        arg("--no-front", action="store_true", help="skip the tuned-HPA front (no equal-CPU comparison; faster)"),
        arg("--iterations", type=int, default=20, help="fixed-point iterations of the calibration (default 20)"),
        arg("--samples", type=int, default=2000, help="user requests drawn per step (default 2000)"),
        arg("--json", action="store_true", help="print only report.json on stdout"),
    ],
)
def cmd_whatif(args: argparse.Namespace) -> int:
    """``hrl-policy whatif``: see :mod:`policy.whatif.report`."""
    from .shadow import cmd_whatif as run

    return run(args)

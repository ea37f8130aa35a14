"""The `sim` sub-command: parse options, run the experiment, print the table, write the files."""

from __future__ import annotations

import argparse
import platform
from dataclasses import asdict, fields
from typing import Any

from mooncake_redis.cli.support import writable_directory
from mooncake_redis.sim.anchors import optimum_note
from mooncake_redis.sim.arguments import (
    at_least,
    capacity_fraction,
    capacity_fractions,
    names_from,
    refuse,
)
from mooncake_redis.sim.indexes.metrics import timer_overhead_ns
from mooncake_redis.sim.indexes.optimum import OPTIMUM_POLICY
from mooncake_redis.sim.indexes.runner import (
    EXPERIMENT_POLICY_NAMES,
    INDEX_NAMES,
    QUICK_CAPACITIES,
    QUICK_POLICIES,
    SimulationSettings,
    run_experiment,
)
from mooncake_redis.sim.indexes.workload import (
    DEFAULT_PAGE_TOKENS,
    MAY_BE_ZERO,
    WorkloadConfig,
    generate_workload,
)
from mooncake_redis.sim.redis_backend import DEFAULT_CAPACITY_FRACTION, run_redis_backend
from mooncake_redis.sim.report import (
    CSV_NAME,
    JSON_NAME,
    PLOT_NAME,
    format_results,
    wrapped,
    write_hit_rate_plot,
    write_results,
    written_line,
)
from mooncake_redis.sim.service_cli import add_service_arguments
from mooncake_redis.sim.trace_cli import add_trace_arguments, run_trace

_WORKLOAD_HELP = {
    "sessions": "concurrent chat sessions, their turns interleaved at random",
    "turns": "turns (question + answer) per session",
    "system_prompt_tokens": "tokens of the system prompt every session shares",
    "question_tokens": "mean tokens per user question (each drawn from mean/2..3*mean/2)",
    "answer_tokens": "mean tokens per model answer (each drawn from mean/2..3*mean/2)",
    "layers": "transformer layers; every position has one KV entry per layer and head",
    "heads": "attention heads per layer",
    "references_per_token": "spans of earlier turns each generated token reads back",
    "reference_tokens": "tokens per read-back span",
    "recent_window_tokens": "just-generated tokens each generated token re-reads",
    "vocabulary_size": "token ids are drawn below this (only the page hashes see them)",
    "seed": "random seed: the same seed and options give the same workload",
}


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `sim` sub-command to a CLI's sub-parsers."""
    parser = subparsers.add_parser(
        "sim",
        help="simulate hash-table vs radix-tree KV-cache indexes under eviction policies",
        description=(
            "Replay a generated multi-turn chat workload, or with --trace the page chains of "
            "a Mooncake trace, against every chosen (index, policy, capacity) and report hit "
            "rate, lookup and eviction time, and index memory. See docs/SIMULATION.md."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    workload = parser.add_argument_group("workload")
    defaults = WorkloadConfig()
    for field in fields(WorkloadConfig):
        workload.add_argument(
            "--" + field.name.replace("_", "-"),
            type=at_least(0 if field.name in MAY_BE_ZERO else 1),
            default=getattr(defaults, field.name),
            help=_WORKLOAD_HELP[field.name],
        )
    experiment = parser.add_argument_group("experiment")
    settings = SimulationSettings()
    experiment.add_argument(
        "--indexes",
        type=names_from(INDEX_NAMES, "index"),
        default=argparse.SUPPRESS,  # each mode has its own default
        help=f"comma-separated indexes to compare, from {', '.join(INDEX_NAMES)} (default: "
             "all of them; with --trace, hash and radix, the two that hold page chains)",
    )
    experiment.add_argument(
        "--full",
        action="store_true",
        help="the whole matrix: every policy and capacities "
             f"{','.join(map(str, settings.capacity_fractions))} (about 3 times as long as the "
             f"default run, {', '.join(QUICK_POLICIES)} at "
             f"{','.join(map(str, QUICK_CAPACITIES))}; with --trace every policy is the default)",
    )
    experiment.add_argument(
        "--policies",
        type=names_from(EXPERIMENT_POLICY_NAMES, "policy"),
        default=argparse.SUPPRESS,  # the default run's, --full's, or --trace's
        help=f"comma-separated eviction policies, from {', '.join(EXPERIMENT_POLICY_NAMES)} "
             f"({OPTIMUM_POLICY}: the offline optimum, evicting what is used again "
             f"farthest ahead) (default: {','.join(QUICK_POLICIES)}; with --full or --trace "
             "all of them)",
    )
    experiment.add_argument(
        "--capacities",
        type=capacity_fractions,
        default=argparse.SUPPRESS,
        help="comma-separated cache capacities as fractions of the working set, e.g. 0.1,0.2 "
             f"(default: {','.join(map(str, QUICK_CAPACITIES))}; with --full or --trace "
             f"{','.join(map(str, settings.capacity_fractions))})",
    )
    experiment.add_argument(
        "--scan-limit",
        type=at_least(1),
        default=settings.scan_limit,
        help="entries hash-bounded-scan looks at for an unprotected victim before giving up "
             "(not with --trace)",
    )
    experiment.add_argument(
        "--block-tokens",
        type=at_least(1),
        default=settings.block_tokens,
        help="positions per block for block-heat eviction (with --trace a block is a page)",
    )
    experiment.add_argument(
        "--half-life-uses",
        type=at_least(1),
        default=settings.half_life_uses,
        help="position uses after which a block's access heat has halved (block-heat)",
    )
    output = parser.add_argument_group("output")
    output.add_argument(
        "--out",
        type=writable_directory,  # checked before the run, not after it
        default="out/sim",
        help=f"directory for {CSV_NAME}, {JSON_NAME} and (with --plot) {PLOT_NAME}",
    )
    output.add_argument(
        "--plot", action="store_true", help=f"also write {PLOT_NAME}: hit rate against capacity"
    )
    output.add_argument(
        "--no-progress", action="store_true", help="no progress bar on stderr"
    )
    backend = parser.add_argument_group("backend")
    backend.add_argument(
        "--backend",
        choices=("memory", "redis"),
        default="memory",
        help="memory: the in-process indexes; redis: replay page chains on the service, "
        "with and without the radix tree (URL: the global --url, $MOONCAKE_REDIS_URL or "
        "the in-process memory://)",
    )
    backend.add_argument(
        "--page-tokens",
        type=at_least(1),
        default=DEFAULT_PAGE_TOKENS,
        help="tokens per KV page in the page chains the redis backend replays (a trace's "
             "pages are its 512-token blocks)",
    )
    backend.add_argument(
        "--capacity-fraction",
        type=capacity_fraction,
        default=DEFAULT_CAPACITY_FRACTION,
        help="redis backend, generated workload: the pool's capacity as a fraction of the "
             "workload's distinct pages (with --trace: --capacities)",
    )
    add_service_arguments(backend)
    add_trace_arguments(parser)
    parser.set_defaults(func=run)


def fill_matrix_defaults(args: argparse.Namespace) -> None:
    """The policies and capacities not given: the default run's (QUICK_*), or with --full
    or --trace every policy and SimulationSettings' capacities; with --routers, a pool
    that keeps every page."""
    full = SimulationSettings()
    whole = args.full or hasattr(args, "trace")
    if not hasattr(args, "policies"):
        args.policies = full.policies if whole else QUICK_POLICIES
    if not hasattr(args, "capacities"):
        args.capacities = ((1.0,) if hasattr(args, "routers")
                           else full.capacity_fractions if whole else QUICK_CAPACITIES)


def simulation_settings(args: argparse.Namespace) -> SimulationSettings:
    """What a run of the generated workload compares (ValueError for a bad combination)."""
    fill_matrix_defaults(args)
    return SimulationSettings(
        indexes=getattr(args, "indexes", INDEX_NAMES),
        policies=args.policies,
        capacity_fractions=args.capacities,
        scan_limit=args.scan_limit,
        block_tokens=args.block_tokens,
        half_life_uses=args.half_life_uses,
    )


def run(args: argparse.Namespace) -> int:
    """Run the sub-command; the exit code is 0, or 2 for input the simulation cannot use."""
    fill_matrix_defaults(args)
    if hasattr(args, "trace"):
        return run_trace(args)
    if hasattr(args, "routers"):
        return refuse("--routers needs a trace: add --trace FILE")
    try:
        config = WorkloadConfig(
            **{field.name: getattr(args, field.name) for field in fields(WorkloadConfig)})
        settings = simulation_settings(args)
    except ValueError as error:
        return refuse(str(error))
    workload = generate_workload(config)
    if args.backend == "redis":
        return run_redis_backend(workload, args)
    results = run_experiment(workload, settings, show_progress=not args.no_progress)
    print(format_results(results))
    if OPTIMUM_POLICY in settings.policies:
        print("\n" + wrapped(optimum_note()))
    description = {
        "workload": asdict(config),
        "working_set_entries": workload.working_set_entries,
        "settings": asdict(settings),
        "timer_overhead_ns": timer_overhead_ns(),
        "python": platform.python_version(),
    }
    written = write_results(results, description, args.out)
    if args.plot:
        written.append(args.out / PLOT_NAME)
        write_hit_rate_plot(results, written[-1])
    print(written_line(written))
    return 0

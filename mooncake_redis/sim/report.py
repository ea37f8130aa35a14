"""Results as a text table, CSV, JSON and a hit-rate-against-capacity plot."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, NamedTuple

from mooncake_redis.sim.indexes.metrics import RunMetrics

CSV_NAME = "results.csv"
JSON_NAME = "results.json"
PLOT_NAME = "sim_hit_rate.png"

# (header, how to show the value): the columns a reader compares; CSV and JSON carry all.
_TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("index", "{}"),
    ("policy", "{}"),
    ("capacity_fraction", "{:.2f}"),
    ("hit_rate", "{:.2%}"),
    ("lookup_mean_ns", "{:,.0f}"),
    ("lookup_p99_ns", "{:,.0f}"),
    ("eviction_mean_ns", "{:,.0f}"),
    ("eviction_p99_ns", "{:,.0f}"),
    ("eviction_ns_per_entry", "{:,.0f}"),
    ("memory_bytes", "{:,}"),
)


def format_table(
    results: Sequence[Any], columns: Sequence[tuple[str, str]] = _TABLE_COLUMNS
) -> str:
    """A fixed-width table, one row per run (any dataclass rows, given their columns);
    plain "{}" columns are text, left-aligned, every other column right-aligned."""
    headers = [name for name, _ in columns]
    rows = [
        [pattern.format(getattr(result, name)) for name, pattern in columns]
        for result in results
    ]
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows)]
    text_columns = {name for name, pattern in columns if pattern == "{}"}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(width) if name in text_columns else cell.rjust(width)
            for cell, width, name in zip(cells, widths, headers)
        ).rstrip()

    separator = "  ".join("-" * width for width in widths)
    return "\n".join([line(headers), separator, *(line(row) for row in rows)])


def write_csv(results: Sequence[Any], path: Path, row_type: type[Any] = RunMetrics) -> None:
    """One line per row, every field of the row dataclass a column."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[field.name for field in fields(row_type)])
        writer.writeheader()
        writer.writerows(asdict(result) for result in results)


def write_json(results: Sequence[Any], run_description: dict[str, Any], path: Path) -> None:
    """The rows plus what produced them (workload, settings, timer overhead)."""
    document = {"run": run_description, "results": [asdict(result) for result in results]}
    path.write_text(json.dumps(document, indent=2) + "\n")


def write_results(
    results: Sequence[Any],
    run_description: dict[str, Any],
    out: Path,
    csv_name: str = CSV_NAME,
    json_name: str = JSON_NAME,
    row_type: type[Any] = RunMetrics,
) -> list[Path]:
    """The rows as CSV and JSON in `out` (created if needed); returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / csv_name, out / json_name]
    write_csv(results, written[0], row_type)
    write_json(results, run_description, written[1])
    return written


class PlotPanel(NamedTuple):
    """One panel of a plot: which rate (a 0..1 field of the rows) against capacity."""

    field: str
    y_label: str
    title: str


HIT_RATE_PANELS = (
    PlotPanel("hit_rate", "hit rate (%)",
              "KV-cache hit rate against capacity, per eviction policy and index"),
)


def write_hit_rate_plot(
    results: Sequence[Any],
    path: Path,
    panels: Sequence[PlotPanel] = HIT_RATE_PANELS,
    x_label: str = "cache capacity (fraction of the working set)",
) -> None:
    """Rates against capacity, one panel per field and one line per (index, policy);
    same-policy lines share a colour."""
    import matplotlib

    matplotlib.use("Agg")  # no display: the plot only goes to a file
    import matplotlib.pyplot as plt

    policies = list(dict.fromkeys(result.policy for result in results))
    indexes = list(dict.fromkeys(result.index for result in results))
    colours = plt.get_cmap("tab10")
    markers = "osD^v<>p"
    line_styles = ["-", "--", ":", "-."]
    figure, all_axes = plt.subplots(1, len(panels), figsize=(8 * len(panels), 5), squeeze=False)
    for axes, panel in zip(all_axes[0], panels):
        for policy_number, policy in enumerate(policies):
            for index_number, index in enumerate(indexes):
                points = sorted(
                    (result.capacity_fraction, getattr(result, panel.field))
                    for result in results
                    if result.policy == policy and result.index == index
                )
                if not points:
                    continue
                capacities, rates = zip(*points)
                axes.plot(
                    capacities,
                    [100 * rate for rate in rates],
                    color=colours(policy_number),
                    marker=markers[index_number % len(markers)],
                    linestyle=line_styles[index_number % len(line_styles)],
                    markersize=5,
                    label=f"{policy} / {index}",
                )
        axes.set_xlabel(x_label)
        axes.set_ylabel(panel.y_label)
        axes.set_title(panel.title)
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=7, ncol=len(policies), loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)

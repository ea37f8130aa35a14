"""Results as text tables that fit a terminal, CSV, JSON, and line plots."""

from __future__ import annotations

import csv
import json
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, NamedTuple

from mooncake_redis.sim.indexes.metrics import RunMetrics
from mooncake_redis.text import human_bytes

CSV_NAME = "results.csv"
JSON_NAME = "results.json"
PLOT_NAME = "sim_hit_rate.png"

TERMINAL_COLUMNS = 100
"""Every table the sim prints fits a terminal this wide (tests/sim/test_sim_output.py):
the tables show the columns a reader compares, the CSV and JSON every field."""

MISSING = "-"
"""A cell with no value: a figure the row does not have (the optimum is timed by nobody)."""


class Column(NamedTuple):
    """A table column: its header and how a row shows in it; text is left-aligned."""

    header: str
    cell: Callable[[Any], str]
    text: bool = False


def text_column(header: str, name: str) -> Column:
    return Column(header, lambda row: str(getattr(row, name)), text=True)


def _shown(value: Any, pattern: str) -> str:
    return MISSING if value is None else pattern.format(value)


def number_column(header: str, name: str, pattern: str) -> Column:
    """A field of the row, formatted; MISSING for None."""
    return Column(header, lambda row: _shown(getattr(row, name), pattern))


def pair_column(header: str, first: str, second: str, pattern: str,
                second_pattern: str | None = None) -> Column:
    """Two fields in one cell, "first/second" (a median and its p99, a mean and its peak);
    MISSING when the first is None."""
    def cell(row: Any) -> str:
        if getattr(row, first) is None:
            return MISSING
        shown_second = (second_pattern or pattern).format(getattr(row, second))
        return f"{pattern.format(getattr(row, first))}/{shown_second}"

    return Column(header, cell)


def bytes_column(header: str, name: str) -> Column:
    return Column(header, lambda row: human_bytes(getattr(row, name)))


def wrapped(text: str) -> str:
    """A paragraph in lines that fit the terminal."""
    return textwrap.fill(text, width=TERMINAL_COLUMNS)


def format_table(rows: Sequence[Any], columns: Sequence[Column], title: str = "") -> str:
    """A fixed-width table, one row per result, under an optional title (wrapped)."""
    cells = [[column.cell(row) for column in columns] for row in rows]
    headers = [column.header for column in columns]
    widths = [max(map(len, column)) for column in zip(headers, *cells)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            value.ljust(width) if column.text else value.rjust(width)
            for value, width, column in zip(values, widths, columns)
        ).rstrip()

    separator = "  ".join("-" * width for width in widths)
    lines = [line(headers), separator, *(line(row) for row in cells)]
    return "\n".join(([wrapped(title)] if title else []) + lines)


RUN_COLUMNS = (
    text_column("index", "index"),
    text_column("policy", "policy"),
    number_column("capacity", "capacity_fraction", "{:.2f}"),
)
"""What names a run: every in-memory table starts with them."""

TIMING_COLUMNS = (
    pair_column("lookup p50/p99", "lookup_p50_ns", "lookup_p99_ns", "{:,.0f}"),
    pair_column("evict p50/p99", "eviction_p50_ns", "eviction_p99_ns", "{:,.0f}"),
)
"""Median/p99 of the timed calls (ns)."""

RATE_COLUMNS = (
    *RUN_COLUMNS,
    number_column("hit rate", "hit_rate", "{:.2%}"),
    number_column("of optimum", "hit_rate_of_optimum", "{:.1%}"),
    number_column("evicted", "evicted_entries", "{:,}"),
)
COST_COLUMNS = (*RUN_COLUMNS, *TIMING_COLUMNS, number_column("memory B", "memory_bytes", "{:,}"))


def format_results(results: Sequence[RunMetrics]) -> str:
    """The generated workload's two tables: hit rates, then costs (the optimum, timed by
    nobody, has no costs row)."""
    costs = [result for result in results if result.lookup_p50_ns is not None]
    return "\n\n".join([
        format_table(results, RATE_COLUMNS,
                     "Hit rate (reads that found their entry cached; capacity: fraction of "
                     "the working set)"),
        format_table(costs, COST_COLUMNS,
                     "Costs (lookup and eviction time in ns, median/p99 per call; index "
                     "memory in bytes)"),
    ])


def written_line(paths: Sequence[Path]) -> str:
    """'wrote a.csv, a.json and b.png to DIR': one directory, named once."""
    names = [path.name for path in paths]
    listed = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
    return f"wrote {listed} to {paths[0].parent}"


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
    """One panel of a plot: which rate (a 0..1 field of the rows) against the x field."""

    field: str
    y_label: str
    title: str


HIT_RATE_PANELS = (
    PlotPanel("hit_rate", "hit rate (%)",
              "KV-cache hit rate against capacity, per eviction policy and index"),
)

SAME_LINE_TOLERANCE = 0.001
"""Rates (0..1) this close at every point draw as one line: 0.1 points, about a line's
width on these plots, so one would hide the other."""

SAME_LINE_NOTE = "coinciding lines drawn once (= equal, ≈ within 0.1 points), later ones thinner"
"""The legend's title: a line may stand for several series, and lines that meet along a
stretch show each other's edges."""


class Line(NamedTuple):
    """Series drawn as one line: each member is (colour key, style key, whether its points
    equal the first member's exactly, rather than within SAME_LINE_TOLERANCE)."""

    members: list[tuple[str, str, bool]]
    points: tuple[tuple[float, float], ...]
    """The first member's, which the line draws."""

    @property
    def label(self) -> str:
        """'lru / hash = radix ≈ block-heat / radix': a colour key once for its run."""
        text = ""
        previous = None
        for colour, style, exact in self.members:
            if previous is not None:
                text += " = " if exact else " ≈ "
            text += style if colour == previous else f"{colour} / {style}"
            previous = colour
        return text


def _coincide(first: Sequence[tuple[float, float]], second: Sequence[tuple[float, float]]
              ) -> bool:
    return len(first) == len(second) and all(
        x == other_x and abs(y - other_y) <= SAME_LINE_TOLERANCE
        for (x, y), (other_x, other_y) in zip(first, second))


def merge_identical(series: Iterable[tuple[str, str, Sequence[tuple[float, float]]]]
                    ) -> list[Line]:
    """(colour key, style key, points) -> Lines, in first appearance order: a series that
    coincides with an earlier line's points (within SAME_LINE_TOLERANCE everywhere) joins
    it instead of being drawn over it, where it would hide or be hidden."""
    lines: list[Line] = []
    for colour, style, points in series:
        ordered = tuple(sorted(points))
        if not ordered:
            continue
        line = next((line for line in lines if _coincide(line.points, ordered)), None)
        if line is None:
            lines.append(Line([(colour, style, True)], ordered))
        else:
            line.members.append((colour, style, line.points == ordered))
    return lines


def write_line_plot(
    path: Path,
    panels: Sequence[tuple[PlotPanel, list[Line]]],
    x_label: str,
    x_log2: bool = False,
) -> list[list[str]]:
    """One panel per entry, one line per Line (colour by its first member's colour key,
    marker and dash by its style key); returns each panel's legend labels."""
    import matplotlib

    matplotlib.use("Agg")  # no display: the plot only goes to a file
    import matplotlib.pyplot as plt

    colour_keys = list(dict.fromkeys(
        colour for _, lines in panels for line in lines for colour, _, _ in line.members))
    style_keys = list(dict.fromkeys(
        style for _, lines in panels for line in lines for _, style, _ in line.members))
    colours = plt.get_cmap("tab10")
    markers = "osD^v<>p"
    line_styles = ["-", "--", ":", "-."]
    figure, all_axes = plt.subplots(1, len(panels), figsize=(8 * len(panels), 5), squeeze=False)
    legends = []
    for axes, (panel, lines) in zip(all_axes[0], panels):
        for number, line in enumerate(lines):
            colour, style, _ = line.members[0]
            style_number = style_keys.index(style)
            x_values, rates = zip(*line.points)
            # Different lines can still meet along a stretch: each is drawn thinner than
            # the one before it, so one that runs over another leaves its edges showing.
            narrowing = number / max(1, len(lines) - 1)
            axes.plot(
                x_values,
                [100 * rate for rate in rates],
                color=colours(colour_keys.index(colour) % 10),
                marker=markers[style_number % len(markers)],
                linestyle=line_styles[style_number % len(line_styles)],
                linewidth=3.5 - 2.25 * narrowing,
                markersize=8 - 4 * narrowing,
                label=line.label,
            )
        if x_log2:
            axes.set_xscale("log", base=2)
            ticks = sorted({x for line in lines for x, _ in line.points})
            axes.set_xticks(ticks, [f"{tick:g}" for tick in ticks])
        axes.set_xlabel(x_label)
        axes.set_ylabel(panel.y_label)
        axes.set_title(panel.title)
        axes.grid(True, alpha=0.3)
        legend = axes.legend(fontsize=7, loc="best", title=SAME_LINE_NOTE, title_fontsize=7)
        legends.append([text.get_text() for text in legend.get_texts()])
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return legends


def write_hit_rate_plot(
    results: Sequence[Any],
    path: Path,
    panels: Sequence[PlotPanel] = HIT_RATE_PANELS,
    x_label: str = "cache capacity (fraction of the working set)",
) -> list[list[str]]:
    """Rates against capacity, one panel per field and one line per (policy, index),
    same-policy lines in one colour; identical lines drawn once. Returns the legends."""
    pairs = list(dict.fromkeys((result.policy, result.index) for result in results))
    drawn = []
    for panel in panels:
        series = [
            (policy, index, [(result.capacity_fraction, getattr(result, panel.field))
                             for result in results
                             if (result.policy, result.index) == (policy, index)])
            for policy, index in pairs
        ]
        drawn.append((panel, merge_identical(series)))
    return write_line_plot(path, drawn, x_label)

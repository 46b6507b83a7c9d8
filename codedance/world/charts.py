"""Chart reading: bar, line and pie charts rendered with matplotlib from real tables shipped in
`vega_datasets` (its offline subset: barley yields, Seattle weather, Iowa electricity, cars,
wheat prices, US driving).

easy: a bar chart, "Which … has the highest/lowest …?" (choice among the bars' labels).
medium: a bar chart, the value of one named bar, or a line chart, the value in one year
(relaxed 5 %); read against the y axis' tick labels.
hard: a pie chart, one slice's share in per cent, or a bar chart, the difference between two
named bars (relaxed 5 %; the axis' top is not its top tick, a likely first mistake).
Charts are 840×504 (dpi 100), DejaVu Sans, no axis titles (the quantity is in the title).
Not handled: stacked or grouped bars, log axes, rotated tick labels, charts without a y axis.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from codedance.types import AnswerKind, Image
from codedance.world.base import Difficulty, Draft, WorldError, skill

LETTERS = "ABCDEF"
BAR_COLOR = "#4c72b0"


@dataclass(frozen=True)
class Table:
    """One small table: a title, its quantity's name, labels and values (real data)."""

    title: str
    quantity: str
    labels: tuple[str, ...]
    values: tuple[float, ...]


@lru_cache(maxsize=1)
def _frames():
    try:
        from vega_datasets import local_data
    except ImportError:  # pragma: no cover - depends on the install
        raise WorldError(
            "the charts skill needs vega_datasets (pip install vega_datasets)"
        ) from None
    import warnings

    with warnings.catch_warnings():  # vega_datasets passes a keyword pandas 3 deprecates
        warnings.simplefilter("ignore")
        return (
            local_data.barley(),
            local_data.seattle_weather(),
            local_data.iowa_electricity(),
            local_data.cars(),
            local_data.wheat(),
            local_data.driving(),
        )


def category_tables() -> tuple[Table, ...]:
    """Tables with 3–6 named categories (bar and pie charts)."""
    barley, weather, iowa, cars, _wheat, _driving = _frames()
    out = []
    for (year, variety), g in barley.groupby(["year", "variety"]):
        g = g.sort_values("site")
        out.append(
            Table(
                f"Barley yield of {variety}, {year} (bushels/acre)",
                "yield",
                tuple(str(s) for s in g["site"]),
                tuple(round(float(v), 1) for v in g["yield"]),
            )
        )
    weather = weather.assign(year=weather["date"].dt.year)
    for year, g in weather.groupby("year"):
        counts = g["weather"].value_counts().sort_index()
        out.append(
            Table(
                f"Seattle: days by weather, {year}",
                "number of days",
                tuple(str(k) for k in counts.index),
                tuple(float(v) for v in counts.values),
            )
        )
    iowa = iowa.assign(year=iowa["year"].dt.year)
    for year, g in iowa.groupby("year"):
        out.append(
            Table(
                f"Iowa net electricity generation, {year} (GWh)",
                "generation",
                tuple(str(s) for s in g["source"]),
                tuple(float(v) for v in g["net_generation"]),
            )
        )
    cars = cars.assign(year=cars["Year"].dt.year)
    for year, g in cars.groupby("year"):
        counts = g["Origin"].value_counts().sort_index()
        out.append(
            Table(
                f"Car models by origin, {year}",
                "number of models",
                tuple(str(k) for k in counts.index),
                tuple(float(v) for v in counts.values),
            )
        )
    return tuple(out)


def series_tables() -> tuple[Table, ...]:
    """Year series of 6–8 points (line charts); labels are years."""
    _b, _w, _i, _c, wheat, driving = _frames()
    out = []
    w = wheat.dropna(subset=["wheat"])
    for start in range(0, len(w) - 8, 4):
        g = w.iloc[start : start + 7]
        out.append(
            Table(
                "Price of wheat (shillings per quarter)",
                "price",
                tuple(str(int(y)) for y in g["year"]),
                tuple(float(v) for v in g["wheat"]),
            )
        )
    for start in range(0, len(driving) - 8, 3):
        g = driving.iloc[start : start + 7]
        out.append(
            Table(
                "Miles driven per capita in the US",
                "miles",
                tuple(str(int(y)) for y in g["year"]),
                tuple(float(v) for v in g["miles"]),
            )
        )
    return tuple(out)


def _fmt(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def render(table: Table, kind: str) -> Image:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.4, 5.04), dpi=100)
    if kind == "pie":
        colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"]
        ax.pie(table.values, colors=colors[: len(table.values)], startangle=90, counterclock=False)
        ax.legend(
            table.labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=12, frameon=False
        )
        ax.set_aspect("equal")
    elif kind == "bar":
        ax.bar(table.labels, table.values, color=BAR_COLOR, width=0.6)
    else:
        ax.plot(
            table.labels, table.values, color="#c44e52", marker="o", linewidth=1.5, markersize=6
        )
    if kind != "pie":
        ax.tick_params(labelsize=11)
        ax.set_ylim(0, max(table.values) * 1.12)
        ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(table.title, fontsize=12)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return Image.from_png(buffer.getvalue(), origin="input:0")


def _pick(rng: np.random.Generator, tables: tuple[Table, ...], ok) -> Table:
    order = rng.permutation(len(tables))
    for i in order:
        if ok(tables[int(i)]):
            return tables[int(i)]
    raise WorldError("no table fits")  # pragma: no cover


def _distinct(t: Table) -> bool:
    v = sorted(t.values)
    return len(v) >= 3 and v[-1] > 1.08 * v[-2] and v[1] > 1.08 * v[0] and v[0] > 0


@skill("charts")
def charts(rng: np.random.Generator, difficulty: Difficulty) -> Draft:
    if difficulty is Difficulty.EASY:
        t = _pick(rng, category_tables(), _distinct)
        highest = bool(rng.integers(2))
        pick = int(np.argmax(t.values) if highest else np.argmin(t.values))
        order = [int(i) for i in rng.permutation(len(t.labels))]
        choices = tuple((LETTERS[k], t.labels[i]) for k, i in enumerate(order))
        word = "highest" if highest else "lowest"
        options = " ".join(f"{k}. {v}" for k, v in choices)
        q = f"In the bar chart, which category has the {word} {t.quantity}? Options: {options}"
        return Draft(render(t, "bar"), q, LETTERS[order.index(pick)], AnswerKind.CHOICE, choices)
    if difficulty is Difficulty.MEDIUM:
        if rng.integers(2):
            t = _pick(rng, category_tables(), lambda t: min(t.values) > 0.15 * max(t.values))
            i = int(rng.integers(len(t.labels)))
            q = f"In the bar chart, what is the {t.quantity} of {t.labels[i]}?"
            return Draft(render(t, "bar"), q, _fmt(t.values[i]), AnswerKind.RELAXED)
        t = _pick(rng, series_tables(), lambda t: min(t.values) > 0.15 * max(t.values))
        i = int(rng.integers(len(t.labels)))
        q = f"In the line chart, what is the {t.quantity} in {t.labels[i]}?"
        return Draft(render(t, "line"), q, _fmt(t.values[i]), AnswerKind.RELAXED)
    if rng.integers(2):
        t = _pick(rng, category_tables(), lambda t: len(t.values) <= 6)
        big = [i for i, v in enumerate(t.values) if v >= 0.12 * sum(t.values)]
        i = big[int(rng.integers(len(big)))]
        q = f"In the pie chart, what percentage of the total is {t.labels[i]}?"
        return Draft(
            render(t, "pie"), q, _fmt(100 * t.values[i] / sum(t.values)), AnswerKind.RELAXED
        )
    t = _pick(rng, category_tables(), lambda t: max(t.values) - min(t.values) > 0.3 * max(t.values))
    hi, lo = int(np.argmax(t.values)), int(np.argmin(t.values))
    a, b = (hi, lo) if rng.integers(2) else (lo, hi)
    q = f"In the bar chart, what is the {t.quantity} of {t.labels[a]} minus that of {t.labels[b]}?"
    return Draft(render(t, "bar"), q, _fmt(t.values[a] - t.values[b]), AnswerKind.RELAXED)

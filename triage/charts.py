"""Charts drawn on the server, as SVG and one HTML table: no script, no CDN, nothing to load.

Queue names, labels, tooltips and links are data. Each is escaped where it is written
(format_html), and a chart is marked safe only once it is whole. The markup is also well-formed
XML, which the tests check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

# Okabe and Ito's palette: told apart by most colour-blind readers.
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#000000")
GRID = "#d0d7de"
MUTED = "#656d76"
WIDTH, HEIGHT = 720, 260
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 16, 44
# More tick labels than this overlap on the x axis; the others are left out.
MAX_TICKS = 12


@dataclass(frozen=True)
class Point:
    value: float | None  # a share in [0, 1]; None where there is nothing to show
    title: str
    href: str = ""


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[Point]


@dataclass(frozen=True)
class Bar:
    label: str
    value: float | None  # a share in [0, 1]
    caption: str
    title: str
    href: str = ""
    colour: str = PALETTE[0]


@dataclass(frozen=True)
class Cell:
    count: int
    title: str
    href: str = ""


def _x(index: int, count: int) -> float:
    # Each category owns a band; its mark sits in the middle, so one category is centred.
    return LEFT + (WIDTH - LEFT - RIGHT) * (index + 0.5) / count


def _y(value: float) -> float:
    return TOP + (HEIGHT - TOP - BOTTOM) * (1 - min(max(value, 0.0), 1.0))


def _linked(href: str, inner: SafeString) -> SafeString:
    return format_html('<a href="{}">{}</a>', href, inner) if href else inner


def _frame(categories: Sequence[str]) -> list[SafeString]:
    """The percentage grid and the category labels under it."""
    parts = []
    for percent in (0, 25, 50, 75, 100):
        y = f"{_y(percent / 100):.1f}"
        parts.append(
            format_html(
                '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="{}"/>'
                '<text x="{}" y="{}" text-anchor="end" font-size="11" fill="{}">{}%</text>',
                LEFT,
                WIDTH - RIGHT,
                y,
                y,
                GRID,
                LEFT - 6,
                f"{_y(percent / 100) + 4:.1f}",
                MUTED,
                percent,
            )
        )
    step = max(1, math.ceil(len(categories) / MAX_TICKS))
    for index, category in enumerate(categories):
        if index % step:
            continue
        parts.append(
            format_html(
                '<text x="{}" y="{}" text-anchor="middle" font-size="11" fill="{}">{}</text>',
                f"{_x(index, len(categories)):.1f}",
                HEIGHT - BOTTOM + 18,
                MUTED,
                category,
            )
        )
    if not categories:
        parts.append(
            format_html(
                '<text x="{}" y="{}" text-anchor="middle" fill="{}">Nothing to chart.</text>',
                WIDTH / 2,
                HEIGHT / 2,
                MUTED,
            )
        )
    return parts


def _svg(title: str, parts: list[SafeString]) -> SafeString:
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {}" role="img" '
        'aria-label="{}" style="width: 100%; max-width: {}px; height: auto">'
        "<title>{}</title>{}</svg>",
        WIDTH,
        HEIGHT,
        title,
        WIDTH,
        title,
        mark_safe("".join(parts)),  # each part was escaped by format_html
    )


def line_chart(title: str, categories: Sequence[str], series: Sequence[Series]) -> SafeString:
    """Shares over categories (weeks), a line per series, a linked dot per known value.

    A line breaks where a value is unknown: a week without decisions is not a 0% week.
    """
    parts = _frame(categories)
    legend = []
    for number, line in enumerate(series):
        colour = PALETTE[number % len(PALETTE)]
        runs: list[list[str]] = [[]]
        dots = []
        for index, point in enumerate(line.points):
            if point.value is None:
                runs.append([])
                continue
            x, y = f"{_x(index, len(categories)):.1f}", f"{_y(point.value):.1f}"
            runs[-1].append(f"{x},{y}")
            dot = format_html(
                '<circle cx="{}" cy="{}" r="4" fill="{}"><title>{}</title></circle>',
                x,
                y,
                colour,
                point.title,
            )
            dots.append(_linked(point.href, dot))
        # Lines first, so that the dots (the links) are drawn over them.
        parts.extend(
            format_html(
                '<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>',
                " ".join(run),
                colour,
            )
            for run in runs
            if len(run) > 1
        )
        parts.extend(dots)
        legend.append(
            format_html(
                '<span class="legend-item"><span style="color: {}">●</span> {}</span> ',
                colour,
                line.name,
            )
        )
    return format_html(
        '<figure class="chart">{}<figcaption>{}</figcaption></figure>',
        _svg(title, parts),
        mark_safe("".join(legend)),  # each item was escaped by format_html
    )


def bar_chart(title: str, bars: Sequence[Bar]) -> SafeString:
    """One bar per category, its height a share, its caption above it."""
    parts = _frame([bar.label for bar in bars])
    band = (WIDTH - LEFT - RIGHT) / max(len(bars), 1)
    for index, bar in enumerate(bars):
        centre = _x(index, len(bars))
        if bar.value is not None:
            top = _y(bar.value)
            rect = format_html(
                '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>',
                f"{centre - band * 0.3:.1f}",
                f"{top:.1f}",
                f"{band * 0.6:.1f}",
                f"{_y(0) - top:.1f}",
                bar.colour,
                bar.title,
            )
            parts.append(_linked(bar.href, rect))
        caption_y = _y(bar.value or 0) - 6
        parts.append(
            format_html(
                '<text x="{}" y="{}" text-anchor="middle" font-size="12">{}</text>',
                f"{centre:.1f}",
                f"{caption_y:.1f}",
                bar.caption,
            )
        )
    return format_html('<figure class="chart">{}</figure>', _svg(title, parts))


def heat_map(
    caption: str,
    rows: Sequence[str],
    columns: Sequence[str],
    cells: Mapping[tuple[str, str], Cell],
    *,
    corner: str = "",
) -> SafeString:
    """A table whose cells are shaded by count: rows by columns, an empty cell for none."""
    most = max((cell.count for cell in cells.values()), default=0)
    head = "".join(format_html('<th scope="col">{}</th>', column) for column in columns)
    body = []
    for row in rows:
        tds = []
        for column in columns:
            cell = cells.get((row, column))
            if cell is None or not cell.count:
                # A constant: Django 6 refuses format_html without arguments.
                tds.append(mark_safe("<td></td>"))
                continue
            alpha = 0.15 + 0.85 * cell.count / most
            # Dark cells need light text, the link included.
            colour = "#fff" if alpha > 0.55 else "#1f2328"
            inner = format_html('<span title="{}">{}</span>', cell.title, cell.count)
            if cell.href:
                inner = format_html(
                    '<a href="{}" style="color: {}">{}</a>', cell.href, colour, inner
                )
            tds.append(
                format_html(
                    '<td style="background: rgba(207, 34, 46, {}); color: {}">{}</td>',
                    f"{alpha:.2f}",
                    colour,
                    inner,
                )
            )
        body.append(
            format_html(
                '<tr><th scope="row">{}</th>{}</tr>',
                row,
                mark_safe("".join(tds)),  # each cell was escaped by format_html
            )
        )
    return format_html(
        '<table class="list heat-map" style="width: auto"><caption>{}</caption>'
        '<thead><tr><th scope="col">{}</th>{}</tr></thead><tbody>{}</tbody></table>',
        caption,
        corner,
        mark_safe(head),  # each heading was escaped by format_html
        mark_safe("".join(body)),  # each row was escaped by format_html
    )

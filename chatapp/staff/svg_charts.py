"""Tiny server-side SVG charts, so the staff pages need no JS chart library and no CDN.

Every piece of text goes through `escape`, which is why the results are marked safe:
labels such as error codes come from the database and must never become markup.
"""

import math

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

BAR_COLOR = "#2563eb"
# Two series differ by color and by dash, so they stay apart without color vision.
SERIES_STYLES = [("#2563eb", ""), ("#dc2626", ' stroke-dasharray="6 4"')]
# Text and gridlines in the page's own colour (currentColor): the charts follow its dark mode.
FONT = 'font-family="system-ui, sans-serif" font-size="12" fill="currentColor"'
MAX_LABEL_CHARS = 22
MAX_X_LABELS = 8


def _open(width: int, height: int, title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
            f'width="100%" style="max-width:{width}px" role="img" aria-label="{escape(title)}">'
            f"<title>{escape(title)}</title>")


def _text(x: float, y: float, content: str, anchor: str = "start") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" '
            f'dominant-baseline="middle" {FONT}>{escape(content)}</text>')


def _shorten(label: str) -> str:
    """The chart has a fixed label column; the data table under it has the full text."""
    return label if len(label) <= MAX_LABEL_CHARS else label[: MAX_LABEL_CHARS - 1] + "…"


def bar_chart(title: str, bars: list[tuple[str, float, str]]) -> SafeString:
    """Horizontal bars; each bar is (label, value, text printed after the bar)."""
    width, label_width, value_room, row = 600, 170, 110, 26
    bar_room = width - label_width - value_room
    height = row * max(len(bars), 1) + 10
    peak = max((value for _, value, _ in bars), default=0) or 1
    parts = [_open(width, height, title)]
    if not bars:
        parts.append(_text(width / 2, height / 2, "No data in this period", "middle"))
    for index, (label, value, shown) in enumerate(bars):
        middle = 5 + index * row + row / 2
        length = bar_room * value / peak
        parts += [
            f"<g><title>{escape(label)}: {escape(shown)}</title>",
            _text(label_width - 8, middle, _shorten(label), "end"),
            f'<rect x="{label_width}" y="{middle - row / 2 + 4:.1f}" width="{length:.1f}" '
            f'height="{row - 8}" fill="{BAR_COLOR}"/>',
            _text(label_width + length + 6, middle, shown),
            "</g>",
        ]
    parts.append("</svg>")
    return mark_safe("".join(parts))


def _nice_ceiling(value: float) -> float:
    """A round axis maximum (1, 2 or 5 times a power of ten) at or above value."""
    if value <= 0:
        return 1
    magnitude = 10 ** math.floor(math.log10(value))
    return next(step * magnitude for step in (1, 2, 5, 10) if value <= step * magnitude)


def _runs(points: list[tuple[float, float | None]]) -> list[list[tuple[float, float]]]:
    """Split a series at its missing values, so days without data show as gaps."""
    runs, current = [], []
    for x, y in points:
        if y is None:
            if current:
                runs.append(current)
            current = []
        else:
            current.append((x, y))
    if current:
        runs.append(current)
    return runs


def line_chart(title: str, labels: list[str], series: list[tuple[str, list[float | None]]],
               unit: str = "") -> SafeString:
    """One line per (name, values) series over the x labels; None values are gaps."""
    width, height, left, right, top, bottom = 640, 260, 64, 16, 34, 36
    plot_width, plot_height = width - left - right, height - top - bottom
    known = [value for _, values in series for value in values if value is not None]
    y_max = _nice_ceiling(max(known, default=0))
    step = plot_width / max(len(labels) - 1, 1)

    def x_at(index: int) -> float:
        return left + (plot_width / 2 if len(labels) == 1 else index * step)

    def y_at(value: float) -> float:
        return top + plot_height * (1 - value / y_max)

    parts = [_open(width, height, title)]
    # Five intervals put round numbers on every gridline for each round maximum.
    for tick in range(6):
        value = y_max * tick / 5
        y = y_at(value)
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="currentColor" stroke-opacity="0.15"/>')
        parts.append(_text(left - 6, y, f"{value:g}{unit}", "end"))
    label_every = math.ceil(len(labels) / MAX_X_LABELS) or 1
    for index in range(0, len(labels), label_every):
        parts.append(_text(x_at(index), height - bottom / 2, labels[index], "middle"))
    if not known:
        parts.append(_text(left + plot_width / 2, top + plot_height / 2,
                           "No data in this period", "middle"))
    for number, (name, values) in enumerate(series):
        color, dash = SERIES_STYLES[number % len(SERIES_STYLES)]
        legend_x = left + number * 150
        parts.append(f'<line x1="{legend_x}" x2="{legend_x + 24}" y1="12" y2="12" '
                     f'stroke="{color}" stroke-width="2"{dash}/>')
        parts.append(_text(legend_x + 30, 12, name))
        for run in _runs([(x_at(i), value) for i, value in enumerate(values)]):
            scaled = [(x, y_at(y)) for x, y in run]
            if len(scaled) > 1:
                path = " ".join(f"{x:.1f},{y:.1f}" for x, y in scaled)
                parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                             f'stroke-width="2"{dash}/>')
            parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>'
                      for x, y in scaled]
    parts.append("</svg>")
    return mark_safe("".join(parts))

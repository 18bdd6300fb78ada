"""The SVG of ``bench/scaling.py``: one small panel per sweep, a line per tree."""

from __future__ import annotations

from pathlib import Path


def plot(path: Path, series: dict[str, dict[str, list[tuple[float, float]]]]) -> None:
    """One small SVG panel per sweep: ms/request against x, a line per tree."""
    sweeps = ["prompt", "fleet", "chunks", "burst", "response"]
    colors = ["#1f77b4", "#d62728", "#7f7f7f"]
    width, height, pad = 300, 220, 40
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * len(sweeps)}" '
             f'height="{height}" '
             'font-family="sans-serif" font-size="11">']  # fmt: skip
    for panel, sweep in enumerate(sweeps):
        ox = panel * width
        data = [pts for tree in series.values() for pts in [tree.get(sweep, [])] if pts]
        if not data:
            continue
        xs = [x for pts in data for x, _ in pts]
        ys = [y for pts in data for _, y in pts]
        x_max, y_max = max(xs) or 1, max(ys) or 1
        parts.append(f'<text x="{ox + pad}" y="14">{sweep}: ms/request (max {y_max:.2f})</text>')
        parts.append(
            f'<rect x="{ox + pad}" y="{pad - 20}" width="{width - pad - 10}" '
            f'height="{height - pad - 20}" fill="none" stroke="#999"/>'
        )
        for index, (name, tree) in enumerate(series.items()):
            pts = tree.get(sweep, [])
            coords = " ".join(
                f"{ox + pad + x / x_max * (width - pad - 10):.1f},"
                f"{height - pad - y / y_max * (height - 2 * pad):.1f}"
                for x, y in pts
            )
            color = colors[index % len(colors)]
            parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}"/>')
            parts.append(
                f'<text x="{ox + pad + 5}" y="{pad + 12 * index}" fill="{color}">{name}</text>'
            )
    parts.append("</svg>")
    path.write_text("\n".join(parts))

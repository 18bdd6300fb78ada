"""Render memory plans as a ``rich`` table (what ``shunter plan`` prints)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import JustifyMethod
from rich.table import Table

from gateway.planner.devices import GIB
from gateway.planner.plan import MemoryPlan

FIT_STYLES = {
    "fits": "green",
    "kv_spills": "yellow",
    "partial_offload": "dark_orange",
    "does_not_fit": "red",
}


def _gib(n: float) -> str:
    return f"{n / GIB:.2f}"


def plan_table(
    plans: Sequence[MemoryPlan], title: str = "Memory plan", names: Sequence[str] = ()
) -> Table:
    """One row per plan: sizes in GiB, the fit class (coloured) and its detail; with
    ``names``, each row starts with the name of the deployment it plans."""
    table = Table(title=title)
    if names:
        table.add_column("deployment", justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("model", "left"),
        ("device", "left"),
        ("ctx x slots", "right"),
        ("kv dtype", "left"),
        ("weights GiB", "right"),
        ("KV KiB/tok", "right"),
        ("KV GiB", "right"),
        ("overhead GiB", "right"),
        ("need / have GiB", "right"),
        ("layers", "right"),
        ("fit", "left"),
        ("detail", "left"),
    )
    for header, justify in columns:
        table.add_column(header, justify=justify)
    for index, plan in enumerate(plans):
        style = FIT_STYLES.get(plan.fit, "")
        table.add_row(
            *([names[index]] if names else []),
            plan.model,
            plan.device,
            f"{plan.context} x {plan.slots}",
            plan.kv_dtype,
            _gib(plan.weights_bytes),
            f"{plan.kv_bytes_per_token / 1024:.1f}",
            _gib(plan.kv_bytes),
            _gib(plan.overhead_bytes),
            f"{_gib(plan.required_bytes)} / {_gib(plan.available_bytes)}",
            f"{plan.gpu_layers}/{plan.n_layers}",
            f"[{style}]{plan.fit}[/]" if style else plan.fit,
            plan.detail,
        )
    return table

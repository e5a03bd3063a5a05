"""The checklist (``commprof check``) as a terminal table and as Markdown."""
from __future__ import annotations

from ..items import Item, verdict
from .console import stdout_console


def counts(items: list[Item]) -> str:
    return ", ".join(f"{k} {sum(i.status == k for i in items)}" for k in ("PASS", "WARN", "FAIL", "SKIP"))


def markdown(items: list[Item], data: dict) -> str:
    lines = [f"# commprof check: {data['verdict']} ({counts(items)})", "",
             f"Thresholds version {data['thresholds_version']}; evidence: {', '.join(data['evidence_dirs'])}; "
             f"{data['created']}.", "",
             "| # | item | status | value | threshold | source | hint |", "|---|---|---|---|---|---|---|"]
    for i in items:
        cells = [i.id, i.item, i.status, i.value, i.threshold, i.source, i.hint]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def render(items: list[Item], console=None) -> None:
    from rich.table import Table

    console = console or stdout_console(200)
    colors = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim"}
    t = Table(title=f"commprof check: {verdict(items)} ({counts(items)})", title_justify="left", show_lines=False)
    for col in ("#", "item", "status", "value", "threshold", "source", "hint"):
        t.add_column(col, overflow="fold")
    for i in items:
        t.add_row(i.id, i.item, f"[{colors[i.status]}]{i.status}[/]", i.value, i.threshold, i.source, i.hint)
    console.print(t)

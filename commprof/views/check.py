"""The checklist (``commprof check``) as a terminal table and as Markdown: one table per box, each
headed by the interconnect it was judged by and the evidence that decided it."""
from __future__ import annotations

from commprof.analysis.verdict import Item, headline
from commprof.views.console import stdout_console, Col, fit_table


def counts(items: list[Item]) -> str:
    """'PASS 4, WARN 0, FAIL 0, SKIP 8': the checklist's items, E1 aside, as the headline's 'of 12
    items' counts them (E1 judges the evidence, not the box: its own status is in the table)."""
    listed = [i for i in items if i.id != "E1"]
    return ", ".join(f"{k} {sum(i.status == k for i in listed)}" for k in ("PASS", "WARN", "FAIL", "SKIP"))


def _by_box(items: list[Item]) -> list[tuple[str, list[Item]]]:
    out: dict = {}
    for i in items:
        out.setdefault(i.box, []).append(i)
    return list(out.items())


def interconnect_line(ic: dict | None) -> str:
    """'judged as nvswitch (nvlink3), decided by GPU names in the nccl-tests header (...)'."""
    if not ic:
        return ""
    if ic.get("family") == "cpu":
        return "interconnect: none judged (CPU ranks, gloo)"
    if ic.get("cls") == "multinode":
        link = f" ({ic['intra_link']})" if ic.get("intra_link") else ""
        inside = f"{ic.get('intra_cls') or 'unknown'}{link}"
        return (f"interconnect: multinode, {ic.get('ranks') or '?'} ranks on {ic.get('nodes')} nodes (the network "
                f"between the nodes decides; inside a node {inside}), decided by {ic.get('evidence') or '?'}")
    if ic.get("family") not in ("nvlink", "pcie", "mixed"):
        return f"interconnect: unknown ({ic.get('detail') or 'no evidence'}); link items SKIP"
    link = f" ({ic['link']})" if ic.get("link") else ""
    nodes = f"; TP groups span {ic['nodes']} hosts" if ic.get("nodes", 1) > 1 else ""
    return f"interconnect: {ic['cls']}{link}, decided by {ic.get('evidence') or '?'}{nodes}"


def markdown(items: list[Item], data: dict) -> str:
    lines = [f"# commprof check: {headline(items)} ({counts(items)})", "",
             f"Thresholds version {data['thresholds_version']}; evidence: {', '.join(data['evidence_dirs'])}; "
             f"{data['created']}.", ""]
    boxes = data.get("boxes") or [{"box": "", "items": [i.to_dict() for i in items], "verdict": data["verdict"]}]
    for b in boxes:
        mine = [i for i in items if i.box == b["box"]] if len(boxes) > 1 else items
        if len(boxes) > 1:
            lines += [f"## {b['box']}: {headline(mine)} ({counts(mine)})", ""]
        ic = interconnect_line(b.get("interconnect"))
        if ic:
            lines += [ic[0].upper() + ic[1:] + ".", ""]
        lines += ["| # | item | status | value | threshold | against | source | hint | what now |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for i in mine:
            cells = [i.id, i.item, i.status, i.value, i.threshold, i.basis, i.source, i.hint, i.what_now]
            lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
        lines.append("")
    if data.get("could_not"):
        lines += ["## Not measured", ""] + [f"- could not: {c}" for c in data["could_not"]] + [""]
    return "\n".join(lines)


#: From this width the checklist prints every column; below it the compact layout (summary, the
#: judged items as a table, the skipped ones one line each, threshold/source/hint in check.md).
WIDE = 160


def render(items: list[Item], console=None, boxes=None) -> None:
    """The verdict first, then one table per box; ``boxes``: (label, Interconnect) pairs in order.
    On a terminal narrower than :data:`WIDE` columns: per box the judged items (#, status, item,
    value), a WARN/FAIL item's hint under it, the skipped items one line each."""
    from rich.text import Text

    console = console or stdout_console(200)
    colors = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim", "INSUFFICIENT": "bold magenta"}
    ics = {label: ic for label, ic in (boxes or [])}
    groups = _by_box(items)
    wide = console.width >= WIDE
    if len(groups) > 1:
        console.print(f"commprof check over {len(groups)} boxes: {headline(items)} ({counts(items)})")
    for box, mine in groups:
        head = f"commprof check: {headline(mine)} ({counts(mine)})"
        if box:
            head = f"commprof check, box '{box}': {headline(mine)} ({counts(mine)})"
        ic = ics.get(box) if box else (next(iter(ics.values())) if len(ics) == 1 else None)
        if not wide:
            console.print(head, style="bold", soft_wrap=False)
            if ic is not None:
                console.print(interconnect_line(ic.to_dict()), style="dim")
        status = lambda i: Text(i.status, style=colors.get(i.status, ""))  # noqa: E731
        if wide:
            cols = [Col("#", "left", None), Col("item", "left", None), Col("status", "left", None),
                    Col("value", "left", None), Col("threshold", "left", 2), Col("source", "left", 0),
                    Col("against", "left", 2), Col("hint", "left", 1), Col("what now", "left", 3)]
            fit_table(head, cols, [[i.id, i.item, status(i), i.value, i.threshold, i.source, i.basis, i.hint,
                                    i.what_now] for i in mine], console=console)
            for i in mine:
                if i.status in ("WARN", "FAIL", "INSUFFICIENT"):
                    console.print(Text(f"{i.id} {i.status} what now: ", style=colors[i.status]) + Text(i.what_now))
            if ic is not None:
                console.print(interconnect_line(ic.to_dict()), style="dim")
            continue
        judged = [i for i in mine if i.status != "SKIP"]
        if judged:
            fit_table("", [Col("#", "left", None), Col("status", "left", None), Col("item", "left", None),
                           Col("value", "left", None)], [[i.id, status(i), i.item, i.value] for i in judged],
                      console=console)
            for i in judged:
                if i.status in ("WARN", "FAIL", "INSUFFICIENT"):
                    against = f"against {i.basis}" if i.basis else ""
                    note = "; ".join(x for x in (against, f"hint: {i.hint}" if i.hint else "") if x)
                    if note:
                        console.print(Text(f"{i.id} {i.status}: ", style=colors[i.status]) + Text(note))
                    console.print(Text(f"{i.id} {i.status} what now: ", style=colors[i.status]) + Text(i.what_now))
            passed = [i.id for i in judged if i.status == "PASS"]
            if passed:
                console.print(Text("PASS ", style="green") + Text(f"{', '.join(passed)} what now: accept on "
                                                                  f"{'these items' if len(passed) > 1 else 'this item'}"))
        for i in mine:
            if i.status == "SKIP":
                console.print(Text("SKIP ", style="dim") + Text(f"{i.id} {i.item}: {i.value}"))
                if i.what_now:
                    console.print(Text(f"     what now: {i.what_now}", style="dim"))
    if not wide and items:
        console.print(f"(at {console.width} columns: each item's threshold, source and hint are in check.md and "
                      f"check.json, or on a terminal of {WIDE}+ columns)", style="dim")

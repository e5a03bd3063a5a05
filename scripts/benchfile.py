"""Writing a benchmark's result: ``NAME.json`` (everything) and ``NAME.md`` (the table quoted)."""
from __future__ import annotations

import json
import os


def write_result(out_dir: str, name: str, title: str, result: dict, table: list[str]) -> None:
    """``result`` must hold what/command/start_time/machine/versions/target/met; ``table`` is the
    Markdown table's lines."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=2)
    m = result["machine"]
    lines = [f"# {title} (measured)", "", result["what"] + ".", "",
             f"Machine: {m['host']}, {m['cpu']}, {m['cpu_cores']} cores; torch {result['versions']['torch']}; "
             f"{result['start_time']}. Command: `{result['command']}`.", "", *table,
             "", f"Target {result['target']}: {'met' if result['met'] else 'NOT met'}."]
    with open(os.path.join(out_dir, f"{name}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

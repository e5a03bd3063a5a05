"""A checklist item and the verdict over items: what ``check`` computes and every view shows."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Item:
    id: str
    item: str
    status: str               # PASS / WARN / FAIL / SKIP
    value: str
    threshold: str
    source: str
    hint: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def verdict(items: list[Item]) -> str:
    """FAIL > WARN > PASS; SKIP when nothing could be judged at all."""
    s = {i.status for i in items}
    return "FAIL" if "FAIL" in s else "WARN" if "WARN" in s else "PASS" if "PASS" in s else "SKIP"

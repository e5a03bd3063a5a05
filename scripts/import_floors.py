"""How many floors commprof's internal imports stack: the longest chain of module imports.

A floor is one module in a chain ``a imports b imports c ...`` between commprof modules (a
package's ``__init__`` importing its own submodules is left out: that is how packages work, not a
floor). The import graph has no cycles (tests/test_architecture.py), so the longest chain is a
longest path in a DAG. Usage::

    python scripts/import_floors.py          # prints the floor count and the chain
"""
from __future__ import annotations

import functools
import sys


def _edges(graph, package: str) -> dict[str, set[str]]:
    modules = {m for m in graph.modules if m == package or m.startswith(package + ".")}
    out = {}
    for a in modules:
        out[a] = {b for b in graph.find_modules_directly_imported_by(a)
                  if b in modules and not (b.startswith(a + ".") or a.startswith(b + "."))}
    return out


def longest_chain(package: str = "commprof") -> tuple[str, ...]:
    """The longest import chain between ``package``'s modules, top importer first."""
    import grimp

    graph = grimp.build_graph(package, cache_dir=None)
    edges = _edges(graph, package)

    @functools.lru_cache(maxsize=None)
    def chain_from(m: str) -> tuple[str, ...]:
        best: tuple[str, ...] = ()
        for b in sorted(edges[m]):
            c = chain_from(b)
            if len(c) > len(best):
                best = c
        return (m,) + best

    return max((chain_from(m) for m in sorted(edges)), key=len)


def main() -> int:
    sys.setrecursionlimit(10000)
    chain = longest_chain()
    print(f"{len(chain)} floors: " + " -> ".join(chain))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

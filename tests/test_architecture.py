"""The layers hold (import-linter contracts in .importlinter) and no module imports itself back."""
import os
import subprocess
import sys

from helpers import REPO


def test_import_linter_contracts_are_kept():
    lint = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    res = subprocess.run([lint, "--config", os.path.join(REPO, ".importlinter"), "--no-cache"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout


def test_no_import_cycles():
    import grimp

    graph = grimp.build_graph("commprof", "microbench", "cuda_ext", cache_dir=None)
    cycles = []
    for a in sorted(graph.modules):
        for b in sorted(graph.find_modules_directly_imported_by(a)):
            # a package's __init__ importing its own submodules is how packages work, not a cycle
            if b.startswith(a + ".") or a.startswith(b + "."):
                continue
            if graph.chain_exists(importer=b, imported=a):
                cycles.append(" -> ".join(graph.find_shortest_chain(importer=b, imported=a) + (b,)))
    assert not cycles, "import cycles:\n" + "\n".join(cycles[:20])


def test_no_test_or_script_reads_outside_the_checkout():
    """Everything the tests and benchmarks read is committed, except the real files out of
    repository snapshots, which only ``helpers.shared_data`` reads (and skips without): no other
    path into a sibling ../shared."""
    import glob
    import re

    pattern = re.compile(r"""["']\.\.["']\s*,\s*["']shared["']|\.\./shared/|["']\.\.["']\s*,\s*["']\.\.["']""")
    found = []
    for path in sorted(glob.glob(os.path.join(REPO, "tests", "*.py")) + glob.glob(os.path.join(REPO, "scripts", "*"))):
        if os.path.basename(path) == "helpers.py":
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if pattern.search(line) and "pattern = re.compile" not in line:
                    found.append(f"{os.path.relpath(path, REPO)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


MAX_FLOORS = 11     # the longest chain of internal imports (14 before the verbs became leaves)


def test_import_floors_do_not_grow():
    """scripts/import_floors.py: the longest chain of imports between commprof's own modules."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("import_floors", os.path.join(REPO, "scripts", "import_floors.py"))
    floors = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(floors)
    chain = floors.longest_chain("commprof")
    assert len(chain) >= 3 and all(m.startswith("commprof") for m in chain)
    assert len(chain) <= MAX_FLOORS, f"{len(chain)} floors: " + " -> ".join(chain)


#: Where commprof's own modules may be imported inside a function: the lazy dispatchers, which load
#: only the command's, the API call's or the results dir's module (docs/architecture.md, Imports).
LAZY_DISPATCHERS = {"commprof/cli.py", "commprof/api.py", "commprof/views/show.py", "commprof/views/report.py"}


def function_level_imports(root: str, packages=("commprof", "microbench", "cuda_ext")) -> list[str]:
    """``path:line: import`` of every import of a ``commprof`` module made inside a function, in
    ``packages``, outside :data:`LAZY_DISPATCHERS`. (The rank side and the kernels, ``microbench``
    and ``cuda_ext``, load each other inside functions on purpose: those modules import torch or
    cupy at the top.)"""
    import ast

    found = []
    for pkg in packages:
        for dirpath, _, names in os.walk(os.path.join(root, pkg)):
            for name in sorted(names):
                if not name.endswith(".py"):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                if rel in LAZY_DISPATCHERS:
                    continue
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read(), rel)
                for fn in ast.walk(tree):
                    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        continue
                    for node in ast.walk(fn):
                        mods = [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else \
                            [a.name for a in node.names] if isinstance(node, ast.Import) else []
                        if any(m.split(".")[0] == "commprof" for m in mods):
                            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return sorted(set(found))


def test_commprofs_own_modules_are_imported_at_the_top():
    """A function-level ``from commprof...`` hides a layer's dependency from the reader (and a cycle
    from the tests); only the lazy dispatchers import commprof's modules inside functions."""
    found = function_level_imports(REPO)
    assert not found, "import these at the top of the module:\n" + "\n".join(found)


def test_the_function_level_import_check_finds_one(tmp_path):
    pkg = tmp_path / "commprof" / "analysis"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("import os\n\ndef f():\n    import json\n    from commprof.model import units\n")
    (tmp_path / "commprof" / "cli.py").write_text("def main():\n    from commprof.verbs import sweep\n")
    assert function_level_imports(str(tmp_path)) == ["commprof/analysis/x.py:5: from commprof.model import units"]


def test_ruff_finds_nothing():
    """``ruff check`` with pyproject.toml's rules (the test extra installs ruff; .ci/run runs it too)."""
    import shutil

    import pytest

    ruff = os.path.join(os.path.dirname(sys.executable), "ruff")
    ruff = ruff if os.path.exists(ruff) else shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e .[test] installs it)")
    res = subprocess.run([ruff, "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]

"""The README and docs/ as a reader follows them: every link and anchor lands, every repository
path they name exists, and the README stays short enough to read on one sitting."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "results" / "bench" / "README.md"]
VERB_PAGES = ["sweep", "trace", "predict", "plan", "topo", "gap", "check", "report", "moe", "import", "serve", "p2p", "show"]
TOPIC_PAGES = ["timing", "results", "errors", "architecture"]

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# a path in backticks that starts at one of the repository's own top-level folders
REPO_PATH = re.compile(r"`((?:commprof|microbench|cuda_ext|tests|scripts|results|docs)/[^`\s]*)`")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6} (.+)", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8")))


def test_slug_is_githubs():
    assert slug("`commprof sweep`") == "commprof-sweep"
    assert slug("What will TP=8 cost me per token on box X?") == "what-will-tp8-cost-me-per-token-on-box-x"
    assert slug("meta.json") == "metajson"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_named_exists(page):
    missing = []
    for raw in REPO_PATH.findall(page.read_text(encoding="utf-8")):
        if any(c in raw for c in "<>*{}$") or re.search(r"[A-Z]{3,}", raw):  # placeholders: OUTDIR, <step>
            continue
        path = raw.rstrip(".,;:)").split(":")[0]
        if not (ROOT / path).exists():
            missing.append(raw)
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_readme_is_short_with_a_table_of_contents_and_the_quickstart():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    toc = text.split("## Contents", 1)[1].split("\n## ", 1)[0]
    entries = re.findall(r"\]\(#([^)]+)\)", toc)
    assert len(entries) >= 5
    assert set(entries) <= anchors(ROOT / "README.md")
    # .ci/run and a new user run these two lines exactly
    assert "bash scripts/setup.sh && .venv/bin/commprof sweep --tp 2,4,8" in text
    assert "bash scripts/setup.sh && .venv/bin/python -m pytest" in text


def test_every_verb_and_topic_has_its_page_linked_from_the_readme():
    readme_links = set(links(ROOT / "README.md"))
    for name in VERB_PAGES + TOPIC_PAGES:
        assert (ROOT / "docs" / f"{name}.md").exists(), name
        assert f"docs/{name}.md" in readme_links, f"README does not link docs/{name}.md"
    assert "results/bench/README.md" in readme_links


# Paths of the project's private notes: a user of commprof has none of them, so nothing a user reads
# (code, output, results, docs) may cite them as a source.
PRIVATE_SOURCE = re.compile(r"(?<![\w/.-])(?:\.\./)?(?:shared/(?:FACTS|STYLE|ARCHITECTURE|DEVELOPERS)\.md|shared/research/|shared/data/"
                            r"|research/[\w.-]+\.md)")
TEXT_SUFFIXES = {".py", ".md", ".json", ".csv", ".toml", ".html", ".txt", ".j2", ".sh"}


def test_no_user_facing_file_cites_the_projects_private_notes():
    """Sources name the original public document (datasheet, GitHub file, issue), never shared/... or
    research/... paths; tests and their fixtures' SOURCE notes may name where a file was copied from."""
    found = []
    for top in ("commprof", "microbench", "cuda_ext", "scripts", "results", "docs"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix not in TEXT_SUFFIXES or not path.is_file():
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if PRIVATE_SOURCE.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    for n, line in enumerate((ROOT / "README.md").read_text(encoding="utf-8").splitlines(), 1):
        if PRIVATE_SOURCE.search(line):
            found.append(f"README.md:{n}: {line.strip()[:120]}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("text, cited", [("shared/FACTS.md model table", True), ("../" + "shared/data/nccl-tests/x.txt", True),
                                         ("research/validation-anchors.md C1", True), ("shared/research/tracer-anchors.md", True),
                                         ("facebookresearch/param", False), ("facebookresearch/HolisticTraceAnalysis", False),
                                         ("tests/data/nccl-tests/SOURCE.md", False)])
def test_private_source_pattern(text, cited):
    assert bool(PRIVATE_SOURCE.search(text)) is cited

"""One reader for every verb's results dir: :func:`load` returns typed tables and provenance."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from commprof.model.errors import UsageError
from commprof.model.fileio import read_json_object
from commprof.model.registry import doc_files, table_files
from commprof.results.meta import META_JSON, normalize, read_meta, require_results_dir, run_state
from commprof.results.table import read_table_rows
from commprof.results.sweep import cells_done
from commprof.results.sweep import load_frame

#: Every table a verb writes: file name -> (key in Results.tables, required columns); from the
#: result kinds of :data:`commprof.model.registry.RESULT_KINDS`, read again at each :func:`load`.
TABLES = table_files()
#: JSON documents a dir can hold beside its tables: file name -> key in Results.docs.
DOCS = doc_files()

#: The verb of a dir written before ``meta.json`` named it, from the files it holds (first match).
_VERB_BY_FILE = (("sweep.csv", None), ("trace_summary.csv", "trace"), ("moe_steps.csv", "moe"),
                 ("p2p.csv", "p2p"), ("gap.csv", "gap"), ("predict.csv", "predict"), ("plan.json", "plan"), ("check.json", "check"),
                 ("report.html", "report"), ("topo.json", "topo"),
                 ("serve_levels.csv", "serve"))
_TEXT_COLUMNS = {"op", "mode", "clock", "backend", "impl", "dtype", "ranks", "site", "status", "hosts",
                 "fallback", "comm", "kind", "skew", "placement", "probe", "p2p", "hot_ranks", "hot_experts",
                 "verified", "name", "site_kind", "summary", "transport", "transport_class", "direction", "transports",
                 "local_ranks", "role", "id", "item", "verdict", "evidence", "what_now",
                 "comm_name", "host", "coll", "peer", "timing_source", "gpu_timed", "algo", "proto"}


@dataclass
class Results:
    """What one results dir holds. ``tables`` are pandas DataFrames (numbers as numbers);
    ``docs`` the JSON documents (``topo``, ``hostbw``, ``plan``, ``check``); ``meta`` the
    provenance with every base key (:data:`commprof.results.meta.BASE_KEYS`)."""
    path: str
    verb: str
    meta: dict
    tables: dict = field(default_factory=dict)
    docs: dict = field(default_factory=dict)
    #: ``complete``, ``failed``, ``interrupted``, ``running`` (its writer lives), ``dead`` (meta says
    #: running, its writer is gone) or ``unknown`` (no status); see :func:`.meta.run_state`.
    state: str = "unknown"
    #: One line for a reader to print when the run did not finish ("unfinished sweep (2 of 22 cells): ..."), else None.
    unfinished: str | None = None

    @property
    def kind(self) -> str:
        return self.meta.get("kind", "")

    def __getitem__(self, name: str):
        if name in self.tables:
            return self.tables[name]
        if name in self.docs:
            return self.docs[name]
        raise KeyError(f"{self.path}: no '{name}' (it holds {', '.join([*self.tables, *self.docs]) or 'nothing'})")

    def __contains__(self, name: str) -> bool:
        return name in self.tables or name in self.docs

    def __repr__(self) -> str:
        """One line: the dir, its verb and kind, its state, what it holds (tables with their row
        counts, documents); ``.meta`` holds the whole provenance."""
        held = [f"{k} ({len(v)} rows)" if hasattr(v, "__len__") and not isinstance(v, dict) else k
                for k, v in self.tables.items()] + list(self.docs)
        return (f"<commprof.Results {self.path!r}: {self.verb}, {self.kind or '?'}, {self.state}; "
                f"{', '.join(held) or 'nothing'}>")

    __str__ = __repr__


def _verb_of(path: str, meta: dict, names: set) -> str:
    if meta.get("verb"):
        return str(meta["verb"])
    for fname, verb in _VERB_BY_FILE:
        if fname in names:
            if verb is None:            # a sweep table: measured, imported or a reference profile
                kind = meta.get("kind")
                return {"imported": "import", "modelled": "reference"}.get(kind, "sweep")
            return verb
    raise UsageError(f"results dir '{path}': holds no commprof results (no {', '.join(f for f, _ in _VERB_BY_FILE)})")


def frame(rows: list[dict], header: list[str]):
    """Rows of strings as a DataFrame: numeric columns as numbers (empty -> NaN)."""
    import pandas as pd

    df = pd.DataFrame(rows, columns=header)
    for c in df.columns:
        if c in _TEXT_COLUMNS:
            continue
        conv = pd.to_numeric(df[c], errors="coerce")
        if conv.notna().sum() == (df[c].astype(str).str.strip() != "").sum():
            df[c] = conv
    return df


def load(path: str) -> Results:
    """Read any verb's results dir (old ones too). A corrupt file is one error naming it."""
    require_results_dir(path)
    names = set(os.listdir(path))
    raw = read_meta(path) if META_JSON in names else {}
    verb = _verb_of(path, raw, names)
    res = Results(path=path, verb=verb, meta=normalize(raw, verb))
    for fname, (key, required) in table_files().items():
        if fname in names:
            if fname == "sweep.csv":
                df = load_frame(path, impl="all")
                if raw.get("kind") == "imported":
                    # nccl-tests times a loop of back-to-back calls and reports the average per call
                    df["timing"] = "back-to-back"
                res.tables[key] = df
            else:
                header, rows = read_table_rows(os.path.join(path, fname), required)
                res.tables[key] = frame(rows, header)
    done = None
    if "sweep" in res.tables:
        done = cells_done(res.tables["sweep"].astype(str).to_dict("records"))
    if raw:
        res.state, res.unfinished = run_state(path, raw, done)
    for fname, key in doc_files().items():
        if fname in names:
            res.docs[key] = read_json_object(os.path.join(path, fname), f"'{os.path.join(path, fname)}'")
    return res

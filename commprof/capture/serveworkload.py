"""``commprof serve``'s workloads: built-in (qa, rag, multiturn) or replayed from a JSONL file; the
prompts each request sends, seeded."""
from __future__ import annotations

import json
import random

from commprof.model.errors import UsageError
from commprof.model.serveconfig import ServeConfig, WORDS, WORKLOADS
from commprof.model.fileio import read_user_bytes


# ---------------------------------------------------------------------------------------------
# Workloads


def load_replay(path: str) -> list[dict]:
    """A replay file: one JSON object per line with prompt_tokens (or input_tokens) and
    output_tokens (or max_tokens); blank lines and lines starting with # are skipped."""
    rows = []

    raw = read_user_bytes(path, f"--workload '{path}'", limit=256 << 20)
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise UsageError(f"--workload '{path}': cannot read (not UTF-8 text: byte {e.start})") from None
    for i, line in enumerate(lines, start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):      # also a number over 4,300 digits, or nested too deep
            raise UsageError(f"--workload '{path}' line {i}: not JSON (or not JSON commprof reads)") from None
        if not isinstance(obj, dict):
            raise UsageError(f"--workload '{path}' line {i}: expected an object with prompt_tokens and output_tokens")
        p = obj.get("prompt_tokens", obj.get("input_tokens"))
        o = obj.get("output_tokens", obj.get("max_tokens"))
        if not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1 << 20 for v in (p, o)):
            raise UsageError(f"--workload '{path}' line {i}: prompt_tokens and output_tokens must be whole "
                             "numbers in 1..1048576")
        rows.append({"prompt_tokens": p, "output_tokens": o})
    if not rows:
        raise UsageError(f"--workload '{path}': no requests in the file")
    return rows


def make_prompt(n_tokens: int, rng: random.Random) -> str:
    """About ``n_tokens`` tokens of text, made here (one common word per token)."""
    return " ".join(rng.choice(WORDS) for _ in range(max(1, n_tokens)))


class Workload:
    """Hands out request specs: ``next(client)`` -> (session, turn, prompt text, prompt words,
    max_tokens). Multi-turn clients keep their conversation; ``record`` appends the answer."""

    def __init__(self, cfg: ServeConfig, level_seed: int):
        self.cfg = cfg
        self.rng = random.Random(level_seed)
        self.replay = load_replay(cfg.workload) if cfg.workload not in WORKLOADS else None
        self.spec = WORKLOADS.get(cfg.workload, {"turns": 1})
        self.sessions: dict[int, dict] = {}
        self.count = 0
        self.session_ids = 0

    def _lengths(self) -> tuple[int, int]:
        if self.replay is not None:
            r = self.replay[self.count % len(self.replay)]
            p, o = r["prompt_tokens"], r["output_tokens"]
        else:
            nominal = self.spec["prompt_tokens"]
            p, o = self.rng.randint(nominal // 2, nominal * 3 // 2), self.spec["output_tokens"]
        return self.cfg.prompt_tokens or p, self.cfg.output_tokens or o

    def next(self, client: int) -> dict:
        p, o = self._lengths()
        self.count += 1
        turns = self.spec.get("turns", 1)
        s = self.sessions.get(client)
        if s is None or s["turn"] >= turns:
            self.session_ids += 1
            s = self.sessions[client] = {"id": self.session_ids, "turn": 0, "history": "", "words": 0}
        question = make_prompt(p, self.rng)
        text = (s["history"] + " " + question).strip() if s["history"] else question
        s["turn"] += 1
        s["pending"] = text
        s["pending_words"] = s["words"] + p
        return {"session": s["id"], "turn": s["turn"], "prompt": text, "prompt_words": s["words"] + p,
                "max_tokens": o, "client": client}

    def record(self, client: int, answer: str, ok: bool) -> None:
        s = self.sessions.get(client)
        if s is None or "pending" not in s:
            return
        if not ok:                                # a failed turn ends the conversation
            s["turn"] = self.spec.get("turns", 1)
            return
        s["history"] = (s["pending"] + " " + answer.strip()).strip()
        s["words"] = s["pending_words"] + len(answer.split())

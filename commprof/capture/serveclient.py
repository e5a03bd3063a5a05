"""``commprof serve``'s client: one streamed request (TTFT, the gaps between chunks, tokens in and
out, the error kind of one that did not finish), and the pre-flight that the server is
OpenAI-compatible and serves the model."""
from __future__ import annotations

import asyncio
import json
import re
import random
import time

from commprof.model.errors import UsageError, shown
from commprof.model.serveconfig import BURST_MIN_TOKENS, BURST_TPOT_MS, EndpointError, RequestRow, ServeConfig
from commprof.capture.serveworkload import make_prompt
from commprof.capture import httpstream as hs
from commprof.capture.httpstream import Pool


# ---------------------------------------------------------------------------------------------
# One streamed request


def httpx_module():
    try:
        import httpx
    except ImportError:
        raise UsageError("commprof serve needs httpx: pip install httpx (or reinstall commprof)") from None
    return httpx


def request_body(cfg: ServeConfig, prompt: str, max_tokens: int, ignore_eos: bool) -> tuple[str, dict]:
    body: dict = {"model": cfg.model, "max_tokens": max_tokens, "stream": True, "temperature": 0.0,
                  "stream_options": {"include_usage": True}}
    if ignore_eos:
        body["ignore_eos"] = True
    if cfg.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        return "/v1/chat/completions", body
    body["prompt"] = prompt
    return "/v1/completions", body


def _chunk_text(obj: dict, api: str) -> str | None:
    """The text a stream chunk carries ('' for none); None when the chunk is not an OpenAI one."""
    choices = obj.get("choices")
    if not isinstance(choices, list):
        return None
    if not choices:
        return ""                                         # the usage-only chunk
    c = choices[0]
    if not isinstance(c, dict):
        return None
    if api == "chat":
        delta = c.get("delta")
        if delta is None:
            return None
        if not isinstance(delta, dict):
            return None
        text = delta.get("content") or delta.get("reasoning_content") or ""
    else:
        text = c.get("text")
        if text is None:
            return ""
    return text if isinstance(text, str) else None


#: The largest token count a server's ``usage`` may report (no model's context is near it).
MAX_USAGE_TOKENS = 1 << 24


def _token_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_USAGE_TOKENS


async def stream_request(client, cfg: ServeConfig, spec: dict, ignore_eos: bool, t0: float) -> RequestRow:
    """Send one streaming request on ``client`` (a :class:`commprof.capture.httpstream.Pool`) and time it.
    Never raises for a server's failure: the row's ``status`` is ``ok`` or one of
    :data:`ERROR_KINDS`, ``error`` a short reason. The caller sets the row's level fields."""
    path, body = request_body(cfg, spec["prompt"], spec["max_tokens"], ignore_eos)
    row = RequestRow(session=spec["session"], turn=spec["turn"], max_tokens=spec["max_tokens"], status="ok",
                     tokens_in=spec["prompt_words"], tokens_in_source="words", tokens_out=0,
                     tokens_out_source="chunks", chunks=0)
    stamps: list[float] = []
    text_parts: list[str] = []
    finished = False
    start = time.perf_counter()
    row.start_s = start - t0
    resp = None
    try:
        async with asyncio.timeout(cfg.timeout_s):
            resp = await client.post_json(path, body)
            row.http_status = resp.status
            if resp.status >= 400:
                raw = (await resp.read(300))[:300].decode("utf-8", "replace")
                row.status = "http_5xx" if resp.status >= 500 else "http_4xx"
                row.error = f"HTTP {resp.status}: {' '.join(raw.split())[:160]}"
                return row
            async for line in resp.lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    finished = True
                    await resp.finish()           # the stream's end, so that the connection is kept
                    break
                now = time.perf_counter()
                try:
                    obj = json.loads(payload)
                except json.JSONDecodeError:
                    row.status, row.error = "malformed", f"chunk not JSON: {payload[:60]!r}"
                    return row
                if not isinstance(obj, dict):
                    row.status, row.error = "malformed", f"chunk not an object: {payload[:60]!r}"
                    return row
                if "error" in obj:
                    err = obj["error"]
                    msg = err.get("message", err) if isinstance(err, dict) else err
                    row.status, row.error = "server_error", f"error in stream: {str(msg)[:120]}"
                    return row
                text = _chunk_text(obj, cfg.api)
                if text is None:
                    row.status, row.error = "malformed", f"chunk without choices: {payload[:60]!r}"
                    return row
                usage = obj.get("usage")
                if isinstance(usage, dict):
                    # a count the server reports is taken only when it can be one (never negative,
                    # never past any context window); else the chunks counted here stand
                    if _token_count(usage.get("completion_tokens")):
                        row.tokens_out, row.tokens_out_source = usage["completion_tokens"], "usage"
                    if _token_count(usage.get("prompt_tokens")):
                        row.tokens_in, row.tokens_in_source = usage["prompt_tokens"], "usage"
                if text:
                    stamps.append(now)
                    text_parts.append(text)
                ch = obj.get("choices") or [{}]
                if isinstance(ch[0], dict) and ch[0].get("finish_reason"):
                    finished = True
    except TimeoutError:
        row.status, row.error = "timeout", f"no end of stream within --timeout {cfg.timeout_s:g}s"
    except hs.ConnectFailed as e:
        row.status, row.error = "connect", f"cannot connect: {str(e)[:120] or type(e).__name__}"
    except hs.ConnectTimeout as e:
        row.status, row.error = "timeout", f"ConnectTimeout: {str(e)[:100]}"
    except hs.Disconnected as e:
        row.status, row.error = "disconnect", f"{str(e)[:120]}"
    finally:
        if resp is not None:
            resp.release()
    end = time.perf_counter()
    row.chunks = len(stamps)
    row.text = "".join(text_parts)
    if row.tokens_out_source != "usage":
        row.tokens_out = len(stamps)
    if stamps:
        row.ttft_ms = (stamps[0] - start) * 1e3
        gaps = [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])]
        row.gaps_ms = gaps
        if gaps:
            import numpy as np

            g = np.asarray(gaps)
            row.itl_ms_p50, row.itl_ms_p99 = float(np.percentile(g, 50)), float(np.percentile(g, 99))
            row.itl_ms_max = float(g.max())
    if row.status != "ok":
        return row
    row.e2e_ms = ((stamps[-1] if stamps else end) - start) * 1e3
    if not stamps:
        row.status, row.error = "no_tokens", "the stream ended without any text"
    elif not finished:
        row.status, row.error = "disconnect", "the stream ended without finish_reason or [DONE]"
    elif row.tokens_out > 1:
        row.tpot_ms = (row.e2e_ms - row.ttft_ms) / (row.tokens_out - 1)
    row.burst = int(row.tokens_out >= BURST_MIN_TOKENS and row.tpot_ms == row.tpot_ms
                    and row.tpot_ms < BURST_TPOT_MS)
    return row


# ---------------------------------------------------------------------------------------------
# Pre-flight: is this an OpenAI-compatible server serving that model?


def malformed_answer(detail: str) -> str:
    """The words for an answer that is not HTTP: the server's status line (or headers) malformed.
    ``detail`` is the HTTP library's own text (h11 calls a bad status line an "illegal request line"
    or an "illegal status line: b'...'"); the line itself is kept, the library's wording is not."""
    m = re.search(r"(?:bytearray\()?(b['\"].*['\"])\)?$", detail)
    what = "status line" if ("status line" in detail or "request line" in detail or "response line" in detail) \
        else "header"
    seen = f" ({m.group(1)[:60]})" if m else ""
    return (f"the server sent a malformed HTTP {what}{seen}: not an HTTP server (a TLS one wants https://; "
            "another protocol listens on that port?)")


async def preflight(cfg: ServeConfig) -> dict:
    httpx = httpx_module()
    info: dict = {"served_models": None, "ignore_eos": False, "server_header": ""}
    timeout = httpx.Timeout(min(10.0, cfg.timeout_s))
    async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
        try:
            async with asyncio.timeout(timeout.read):      # the whole answer, not each read: a drip ends too
                r = await client.get(cfg.url + "/v1/models")
        except TimeoutError:
            raise EndpointError(f"--url {cfg.url}: no whole answer to GET /v1/models within {timeout.read:g}s "
                                "(the server is too slow or stalled)") from None
        except httpx.ConnectError:
            raise EndpointError(f"--url {cfg.url}: cannot connect (no server listening there?)") from None
        except httpx.TimeoutException:
            raise EndpointError(f"--url {cfg.url}: no answer to GET /v1/models within {timeout.read:g}s") from None
        except httpx.RemoteProtocolError as e:       # h11 names a bad status line "illegal request line"
            raise EndpointError(f"--url {cfg.url}: {malformed_answer(str(e))}") from None
        except httpx.HTTPError as e:
            raise EndpointError(f"--url {cfg.url}: {type(e).__name__}: {str(e)[:120]}") from None
        info["server_header"] = r.headers.get("server", "")
        if r.status_code == 200:
            try:
                data = r.json().get("data")
                ids = [m.get("id") for m in data if isinstance(m, dict)]
            except (ValueError, AttributeError, TypeError):
                ids = None
            if ids:
                info["served_models"] = ids
                if cfg.model not in ids:
                    listed = ", ".join(str(i) for i in ids[:5]) + (", ..." if len(ids) > 5 else "")
                    raise UsageError(f"--model {shown(cfg.model)}: not served at {cfg.url} (it serves: {listed})")
        # One short request: is it an OpenAI streaming endpoint, and does it take ignore_eos?
        spec = {"session": 0, "turn": 0, "prompt": make_prompt(8, random.Random(0)), "prompt_words": 8,
                "max_tokens": 2}
        probe = dict(cfg.__dict__)
        probe["timeout_s"] = min(cfg.timeout_s, 60.0)
        probe_cfg = ServeConfig(**probe)

        pool = Pool(cfg.url, min(10.0, cfg.timeout_s))
        try:
            row = await stream_request(pool, probe_cfg, spec, True, time.perf_counter())
            if row.status == "http_4xx" and "ignore_eos" in row.error:
                row = await stream_request(pool, probe_cfg, spec, False, time.perf_counter())
            else:
                info["ignore_eos"] = row.status in ("ok", "disconnect", "no_tokens")
        finally:
            pool.close()
        status, err = row.status, row.error
        if status == "http_4xx" and row.http_status in (404, 405) and "model" not in err.lower():
            raise EndpointError(f"--url {cfg.url}: POST {request_body(cfg, '', 1, False)[0]} answered "
                                f"{row.http_status}: not an OpenAI-compatible endpoint (or try --api "
                                f"{'chat' if cfg.api == 'completions' else 'completions'})")
        if status == "http_4xx" and "model" in err.lower():
            raise UsageError(f"--model {shown(cfg.model)}: the server refused it ({err[:140]})")
        if status == "http_4xx":
            raise UsageError(f"{cfg.url}: the server refused a test request ({err[:160]})")
        if status == "connect":
            raise EndpointError(f"--url {cfg.url}: {err}")
        if status in ("malformed", "no_tokens") and row.chunks == 0:
            raise EndpointError(f"--url {cfg.url}: the test request's answer is not an OpenAI stream "
                                f"({err[:120]}); not an OpenAI-compatible endpoint?")
        info["probe_status"] = status
        info["probe_error"] = err
    return info

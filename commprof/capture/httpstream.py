"""A lean HTTP/1.1 client for ``commprof serve``'s streamed requests, on asyncio streams.

Why not httpx (which serve uses for everything else): on a machine whose cores the client shares
with the server, every microsecond the client spends per streamed chunk is taken from the server it
measures; this client reads each response with a few buffer operations per chunk (its CPU per
request beside vLLM: results/bench/serve_vs_vllm_bench.md). It speaks what OpenAI-compatible
servers answer: a status line, headers, then a body delimited by ``Content-Length``, by
``Transfer-Encoding: chunked``, or by the connection's close (HTTP/1.0). Connections are kept
alive and reused per level. Failures raise the exceptions below, which serve maps to its error kinds.
"""
from __future__ import annotations

import asyncio
import json
import ssl as _ssl
from urllib.parse import urlsplit

MAX_HEADER_BYTES = 64 << 10


class ConnectFailed(Exception):
    """The TCP (or TLS) connection could not be made."""


class ConnectTimeout(Exception):
    """No connection within the connect timeout."""


class Disconnected(Exception):
    """The connection closed or broke before the response ended, or the response is not HTTP."""


class Response:
    """A response being read: ``status``, ``headers`` (lower-case names), then :meth:`lines`
    (the body split at newlines, without them) or :meth:`read` (the body, at most ``limit`` bytes)."""

    def __init__(self, reader, status: int, headers: dict, pool, conn):
        self.status, self.headers = status, headers
        self._r, self._pool, self._conn = reader, pool, conn
        self._done = False
        te = headers.get("transfer-encoding", "").lower()
        self._chunked = "chunked" in te
        cl = headers.get("content-length")
        self._left = int(cl) if cl is not None and cl.isdigit() and not self._chunked else None
        self._keep = headers.get("connection", "").lower() != "close" and (self._chunked or self._left is not None)

    async def _pieces(self):
        r = self._r
        try:
            if self._chunked:
                while True:
                    size_line = await r.readuntil(b"\n")
                    size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while (await r.readuntil(b"\n")).strip():      # trailers, then the blank line
                            pass
                        break
                    data = await r.readexactly(size)
                    await r.readexactly(2)                             # the chunk's CRLF
                    yield data
            elif self._left is not None:
                while self._left > 0:
                    data = await r.read(min(self._left, 1 << 16))
                    if not data:
                        raise Disconnected("the connection closed before the body's Content-Length")
                    self._left -= len(data)
                    yield data
            else:
                while True:
                    data = await r.read(1 << 16)
                    if not data:
                        break
                    yield data
        except asyncio.IncompleteReadError:
            raise Disconnected("the connection closed inside the response body") from None
        except asyncio.LimitOverrunError:
            raise Disconnected("a chunk-size line too long: not HTTP chunked encoding") from None
        except ValueError:
            raise Disconnected("a chunk size that is not hexadecimal: not HTTP chunked encoding") from None
        except (ConnectionError, OSError) as e:
            raise Disconnected(f"{type(e).__name__}: {e}") from None
        self._done = True

    async def lines(self):
        """The body's lines as text (UTF-8; a trailing CR dropped), as they arrive."""
        buf = b""
        async for data in self._pieces():
            buf += data
            if b"\n" not in data:
                continue
            *full, buf = buf.split(b"\n")
            for line in full:
                yield line.rstrip(b"\r").decode("utf-8", "replace")
        if buf:
            yield buf.rstrip(b"\r").decode("utf-8", "replace")

    async def read(self, limit: int = 1 << 16) -> bytes:
        out = b""
        async for data in self._pieces():
            out += data
            if len(out) >= limit:
                break
        return out[:limit]

    async def finish(self, timeout_s: float = 1.0) -> None:
        """Read what is left of a delimited body (the end of a chunked stream after its last event),
        so that the connection can be kept; never waits longer than ``timeout_s``."""
        if self._done or not self._keep:
            return
        async def rest():
            async for _ in self._pieces():
                pass
        try:
            await asyncio.wait_for(rest(), timeout_s)
        except (asyncio.TimeoutError, Disconnected):
            self._keep = False

    def release(self) -> None:
        """Back to the pool when the body was read to its end and the server keeps the connection."""
        if self._conn is None:
            return
        conn, self._conn = self._conn, None
        if self._done and self._keep:
            self._pool.idle.append(conn)
        else:
            conn[1].close()


class Pool:
    """Keep-alive connections to one server (``http://host:port[/prefix]`` or https)."""

    def __init__(self, base_url: str, connect_timeout_s: float):
        u = urlsplit(base_url)
        self.host, self.https = u.hostname or "127.0.0.1", u.scheme == "https"
        self.port = u.port or (443 if self.https else 80)
        self.netloc = u.netloc
        self.prefix = u.path.rstrip("/")
        self.connect_timeout_s = connect_timeout_s
        self.idle: list = []
        self._ssl = _ssl.create_default_context() if self.https else None

    async def _open(self):
        try:
            return await asyncio.wait_for(asyncio.open_connection(self.host, self.port, ssl=self._ssl,
                                                                  limit=MAX_HEADER_BYTES),
                                          self.connect_timeout_s)
        except asyncio.TimeoutError:
            raise ConnectTimeout(f"no connection to {self.netloc} within {self.connect_timeout_s:g}s") from None
        except (OSError, _ssl.SSLError) as e:
            raise ConnectFailed(f"{self.netloc}: {e.strerror or e}" if isinstance(e, OSError) else str(e)) from None

    async def post_json(self, path: str, body: dict) -> Response:
        """Send ``POST prefix+path`` with a JSON body; the response once its headers are in. A kept
        connection the server has closed meanwhile is replaced by a new one, once."""
        payload = json.dumps(body, separators=(",", ":")).encode()
        head = (f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self.netloc}\r\nContent-Type: application/json\r\n"
                f"Accept: text/event-stream\r\nContent-Length: {len(payload)}\r\n\r\n").encode("latin-1")
        for attempt in (0, 1):
            reused = bool(self.idle)
            conn = self.idle.pop() if reused else await self._open()
            reader, writer = conn
            try:
                writer.write(head + payload)
                await writer.drain()
                status_line = await reader.readuntil(b"\n")
            except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
                writer.close()
                if reused and attempt == 0:
                    continue                      # a stale keep-alive connection: once more, afresh
                raise Disconnected(f"the server closed the connection before answering ({type(e).__name__})") \
                    from None
            except asyncio.LimitOverrunError:
                writer.close()
                raise Disconnected("the server sent a malformed HTTP status line (too long): not HTTP") from None
            parts = status_line.decode("latin-1").split(None, 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
                writer.close()
                raise Disconnected(f"the server sent a malformed HTTP status line ({status_line[:60]!r}): "
                                   "not an HTTP answer")
            headers = {}
            try:
                while True:
                    line = await reader.readuntil(b"\n")
                    if not line.strip():
                        break
                    k, _, v = line.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError):
                writer.close()
                raise Disconnected("the connection closed inside the response headers") from None
            if parts[0] == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive":
                headers["connection"] = "close"
            return Response(reader, int(parts[1]), headers, self, conn)
        raise Disconnected("the server closed the connection before answering")   # not reached

    def close(self) -> None:
        for _, w in self.idle:
            w.close()
        self.idle.clear()

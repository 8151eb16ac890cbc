"""The read loop: JSON-RPC frames off a byte stream, tolerant of a client that gets them wrong.

pygls's own loop (`pygls.io_.run_async`) needs every header to be exactly
``Content-Length: N\\r\\n``. One it cannot read (``Content-Length: abc``, a bare ``\\n``) leaves
it reading each later body together with the next header as one line, which never matches
again: the session is silently dead. It also drops a body that is not JSON without answering,
and allocates whatever length a header claims. This loop instead:

- reads header names case-insensitively, with ``\\r\\n`` or ``\\n`` line ends;
- answers a header block without a usable length with one JSON-RPC error (id null), then
  resynchronises on the next line that *ends* with a Content-Length header, so garbage glued
  in front of a header costs only the garbage;
- answers a body that is not JSON with -32700 (Parse error) and JSON that is not a message
  object (a batch, a bare value, no ``jsonrpc``) with -32600 (Invalid Request), echoing the id
  when there is one;
- refuses lengths above `MAX_BODY` and reads lines in bounded pieces, so a hostile header
  cannot make the server allocate gigabytes;
- never lets an exception out: one bad message is logged (its frames, not its text) and skipped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections.abc import Awaitable, Callable
from typing import Any, BinaryIO

from lsp_server.logs import frames

logger = logging.getLogger(__name__)

MAX_BODY = 256 * 1024 * 1024  # a 5 MB document with every character escaped fits many times over
MAX_LINE = 64 * 1024  # a header line longer than this is garbage
CHUNK = 1024 * 1024
_LENGTH = re.compile(rb"content-length[ \t]*:[ \t]*(\d{1,15})[ \t]*\r?\n\Z", re.IGNORECASE)
_HEADER = re.compile(rb"[!-9;-~]+[ \t]*:[^\r\n]*\r?\n\Z")  # name: value

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


class Source:
    """Where the bytes come from: `line()` (b"" at end of stream; a line longer than MAX_LINE
    arrives in pieces without their line end) and `exactly(n)` (fewer bytes at end of stream)."""

    def line(self) -> Awaitable[bytes]:
        raise NotImplementedError

    def exactly(self, n: int) -> Awaitable[bytes]:
        raise NotImplementedError


class PipeSource(Source):
    """A blocking binary stream (stdin), read on an executor thread."""

    def __init__(self, stream: BinaryIO, executor: Any = None) -> None:
        self._stream = stream
        self._executor = executor

    def _run(self, call: Callable[..., bytes], *args: Any) -> Awaitable[bytes]:
        return asyncio.get_running_loop().run_in_executor(self._executor, call, *args)

    def line(self) -> Awaitable[bytes]:
        return self._run(self._stream.readline, MAX_LINE)

    async def exactly(self, n: int) -> bytes:
        parts: list[bytes] = []
        while n > 0:
            part = await self._run(self._stream.read, min(n, CHUNK))
            if not part:
                break
            parts.append(part)
            n -= len(part)
        return b"".join(parts)


class StreamSource(Source):
    """An asyncio stream (a TCP connection)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    async def line(self) -> bytes:
        try:
            return await self._reader.readline()
        except ValueError:  # longer than the stream's limit: asyncio dropped it
            return b"\x00"  # a piece of garbage without a line end

    async def exactly(self, n: int) -> bytes:
        try:
            return await self._reader.readexactly(n)
        except asyncio.IncompleteReadError as exc:
            return exc.partial


async def read_loop(
    source: Source,
    protocol: Any,
    stop: threading.Event,
    send_error: Callable[[Any, int, str], None],
) -> None:
    """Hand every readable message to `protocol.handle_message` until the stream ends."""
    length: int | None = None  # from this header block
    in_block = False  # a header line (or garbage) has been seen since the last message
    lost = False  # the client has been told its framing is broken; quiet until the next frame
    carry = b""  # the tail of an unfinished line, so a header split across pieces is still found
    while not stop.is_set():
        piece = await source.line()
        if not piece:
            break
        line = carry + piece
        if not piece.endswith(b"\n"):  # part of an over-long line: garbage, keep its tail
            carry, length, in_block = line[-64:], None, True
            continue
        carry = b""
        if not line.strip():  # the blank line that ends a header block
            if length is not None:
                body = await source.exactly(length)
                if len(body) < length:
                    break
                lost = False
                _dispatch(body, protocol, send_error)
            elif in_block and not lost:
                logger.warning("a message header without a usable Content-Length; skipping to the next header")
                send_error(None, PARSE_ERROR, "Parse error: missing or invalid Content-Length header")
                lost = True
            length, in_block = None, False
            continue
        in_block = True
        if (match := _LENGTH.search(line)) is None:
            if not _HEADER.match(line):  # not a header (a body whose frame was wrong): garbage
                length = None
            continue
        length = int(match.group(1))
        if length > MAX_BODY:
            logger.warning("a message of %d bytes is over the limit of %d; skipping it", length, MAX_BODY)
            if not lost:
                send_error(None, INVALID_REQUEST, f"Invalid Request: messages are limited to {MAX_BODY} bytes")
                lost = True
            length, in_block = None, False


def _dispatch(body: bytes, protocol: Any, send_error: Callable[[Any, int, str], None]) -> None:
    try:
        data = json.loads(body)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        logger.warning("a message that is not JSON: %s", type(exc).__name__)
        send_error(None, PARSE_ERROR, "Parse error: the message is not valid JSON")
        return
    if not _is_message(data):
        logger.warning("a message that is not a JSON-RPC 2.0 object")
        msg_id = data.get("id") if isinstance(data, dict) else None
        if not isinstance(msg_id, (int, str)) or isinstance(msg_id, bool):
            msg_id = None
        send_error(msg_id, INVALID_REQUEST, "Invalid Request: expected a JSON-RPC 2.0 message object")
        return
    try:
        # Only the top-level object is a message: structuring it converts the nested ones, so a
        # nested object that happens to have a "jsonrpc" key is never mistaken for one.
        message = protocol.structure_message(data)
        protocol.handle_message(message)
    except Exception as exc:
        # Type and frames only: an exception's text can quote the message, and so the document.
        logger.warning("a message that could not be handled: %s", frames(exc))


def _is_message(data: Any) -> bool:
    """A request, a notification or a response, as far as JSON-RPC 2.0 itself goes."""
    if not isinstance(data, dict) or data.get("jsonrpc") != "2.0":
        return False
    if "method" in data:
        return isinstance(data["method"], str)
    return "id" in data and ("result" in data or "error" in data)

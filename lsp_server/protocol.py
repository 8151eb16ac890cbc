"""Every override of pygls in one place: the only module that touches pygls's private names.

pygls 2.1.1 is pinned, and `contract_problems()` lists what this module relies on in its internals;
`tests/lsp_server/test_pygls_contract.py` runs it, so an upgrade that changes one of them fails
with a message saying what broke and what depends on it. The corrections:

1. **Every request gets an answer.** pygls turns a message whose params fail to deserialize into
   an exception inside `JsonRPCProtocol.structure_message`, which its read loop logs and drops:
   the client waits forever (reported upstream: docs/upstream/pygls-invalid-params.md). Here a
   request gets an InvalidParams error naming the bad fields (paths, never values, which may be
   document text), and a bad notification is logged and skipped. A notification the server must
   not lose track of (a didChange it cannot apply) is handed to `on_unreadable`, so the server
   can stop trusting that document. A request after `shutdown` gets InvalidRequest (pygls ignores
   it; the spec wants an error).
2. **No future per notification.** pygls keeps the future of every notification its generator
   handlers run (didChange among them) in `_request_futures` for good: about a kilobyte per
   keystroke. Finished futures are dropped after each message.
3. **Documents are ours.** The built-in didOpen/didChange/didClose handlers would also keep a copy
   of every document in pygls's workspace, with its own line rules; `lsp_server.documents` keeps
   the one copy used.
4. **Our read loop.** pygls's stdio and TCP loops are replaced by `serve_stdio` and `serve_tcp`,
   which run `transport.read_loop` (it survives malformed frames) and set the server attributes
   pygls's own `shutdown()` uses to stop them.

Framing errors (bad headers, bodies that are not JSON) are `transport`'s job.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

import cattrs
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.io_ import StdoutWriter
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    ResponseErrorMessage,
)
from pygls.protocol.language_server import lsp_method

from lsp_server.logs import frames
from lsp_server.transport import PipeSource, StreamSource, read_loop

logger = logging.getLogger(__name__)

INVALID_REQUEST = -32600


class _Answered:
    """Stands in for a message that could not be read and has already been dealt with."""


def _describe(exc: Exception) -> str:
    """Which fields were wrong, by JSON path; never the values, which may be document text."""
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc, format_exception=_problem))
    return type(exc).__name__


def _problem(exc: BaseException, expected: type | None) -> str:
    if isinstance(exc, KeyError):
        return "required field missing"
    name = getattr(expected, "__name__", None)
    return f"invalid value, expected {name}" if name else "invalid value"


class CpcProtocol(LanguageServerProtocol):
    on_unreadable: Callable[[str, Any], None] | None = None  # (method, raw params) of a dropped notification

    def send_error(self, msg_id: Any, code: int, message: str) -> None:
        """A JSON-RPC error response; `msg_id` None when the request's id could not be read."""
        self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})

    def pending_futures(self) -> int:
        """How many futures pygls holds for messages in flight (a leak shows here)."""
        return len(self._request_futures)

    def structure_message(self, data: dict[str, Any]) -> Any:
        method = data.get("method") if "jsonrpc" in data else None
        if "jsonrpc" not in data:  # a nested object
            return super().structure_message(data)
        if not isinstance(method, str):  # a response to one of our requests
            return self._structure_response(data)
        kind = self.get_message_type(method)
        if kind is None:  # a custom method: JSON-RPC allows omitting params
            kind = JsonRPCRequestMessage if "id" in data else JsonRPCNotification
            data = {"params": None, **data}
        try:
            return self._converter.structure(data, kind)
        except Exception as exc:
            problem = _describe(exc)
            if "id" not in data:
                logger.warning("ignoring %s notification with invalid params: %s", method, problem)
                if self.on_unreadable is not None:
                    self.on_unreadable(method, data.get("params"))
                return _Answered()
            logger.warning("answering %s request with InvalidParams: %s", method, problem)
            error = JsonRpcInvalidParams(f"invalid params for {method}: {problem}")
            self._send_response(data["id"], error=error.to_response_error())
            return _Answered()

    def _structure_response(self, data: dict[str, Any]) -> Any:
        """pygls's own version logs a traceback, whose text can quote the message: not here."""
        try:
            if "error" in data:
                return self._converter.structure(data, ResponseErrorMessage)
            kind = self._result_types.pop(data.get("id", ""), None) or JsonRPCResponseMessage
            return self._converter.structure(data, kind)
        except Exception as exc:
            logger.warning("ignoring a response that could not be read: %s", frames(exc))
            return _Answered()

    def handle_message(self, message: Any) -> None:
        if isinstance(message, _Answered):
            return
        method = getattr(message, "method", None)
        if self._shutdown and method != types.EXIT and getattr(message, "id", None) is not None and method:
            # pygls drops these silently; the spec says a request after shutdown gets an error.
            self.send_error(message.id, INVALID_REQUEST, f"Invalid Request: {method} after shutdown")
            return
        super().handle_message(message)
        self._forget_finished()

    def _forget_finished(self) -> None:
        """Drop finished futures. A request's answer is sent by a callback holding its future, and
        a cancel for a finished request has nothing to cancel, so only the leaked entries go."""
        futures = self._request_futures
        for key in [key for key, future in futures.items() if future.done()]:
            futures.pop(key, None)

    def _forward(self, method: str, params: Any):
        """Run the server's own handler, and nothing of pygls's (no workspace copy)."""
        if (handler := self.fm.features.get(method)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):
        yield from self._forward(types.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        yield from self._forward(types.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):
        yield from self._forward(types.TEXT_DOCUMENT_DID_CLOSE, params)


# --- the read loops ------------------------------------------------------------------------------


def serve_stdio(server: Any, stdin: BinaryIO | None, stdout: BinaryIO | None) -> None:
    """pygls's `start_io`, with our read loop. Returns when the input ends or the server stops."""
    import sys

    server._stop_event = stop = threading.Event()  # pygls's shutdown() sets it
    server.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
    # One thread reads stdin, one read at a time. (pygls's shared pool would do, but it starts
    # a new thread whenever its last one has not yet marked itself idle, so it drifts up to
    # its maximum over a long session: a thread count that looks like a leak.)
    reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cpc-stdin")
    source = PipeSource(stdin or sys.stdin.buffer, reader)
    try:
        asyncio.run(read_loop(source, server.protocol, stop, server.protocol.send_error))
    except BrokenPipeError:
        logger.error("the connection to the client is lost; shutting down")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        reader.shutdown(wait=False, cancel_futures=True)
        server.shutdown()


def serve_tcp(server: Any, host: str, port: int) -> None:
    """pygls's `start_tcp`, with our read loop: one client on `host:port`, for one session.

    A second connection while the first is served is closed at once: the protocol has one writer,
    and taking it over would send the first client's answers (document text) to the second."""
    server._stop_event = stop = threading.Event()
    serving = False

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal serving
        if serving:
            logger.warning("refusing a second connection: this server serves one client")
            writer.close()
            return
        serving = True
        server.protocol.set_writer(writer)
        await read_loop(StreamSource(reader), server.protocol, stop, server.protocol.send_error)
        server.shutdown()

    async def serve() -> None:
        server._server = tcp = await asyncio.start_server(connection, host, port)  # shutdown() closes it
        names = ", ".join(str(sock.getsockname()) for sock in tcp.sockets)
        logger.info("listening on %s", names)
        async with tcp:
            await tcp.serve_forever()

    try:
        asyncio.run(serve())
    except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
        pass


# --- what this module relies on ---------------------------------------------------------------


def contract_problems() -> list[str]:
    """What this module relies on in pygls's internals, checked against the pygls installed.

    One line per broken promise, naming the pygls internal and what here depends on it; empty
    when all hold. Run by tests/lsp_server/test_pygls_contract.py.
    """
    from pygls.lsp.server import LanguageServer
    from pygls.protocol.json_rpc import JsonRPCProtocol

    problems: list[str] = []

    def expect(ok: bool, internal: str, used_for: str) -> None:
        if not ok:
            problems.append(f"pygls changed {internal}; lsp_server/protocol.py uses it to {used_for}")

    def params_of(function: Any) -> list[str]:
        if function is None:
            return []
        try:
            return list(inspect.signature(function).parameters)
        except (TypeError, ValueError):
            return []

    expect(params_of(getattr(JsonRPCProtocol, "_send_data", None)) == ["self", "data"], "JsonRPCProtocol._send_data(data)",
           "write raw error responses (send_error)")  # fmt: skip
    expect(params_of(getattr(JsonRPCProtocol, "_send_response", None))[:4] == ["self", "msg_id", "result", "error"],
           "JsonRPCProtocol._send_response(msg_id, result, error)", "answer a request whose params are invalid")  # fmt: skip
    expect(callable(getattr(JsonRPCProtocol, "structure_message", None)), "JsonRPCProtocol.structure_message",
           "answer requests whose params fail to deserialize")  # fmt: skip
    expect(callable(getattr(JsonRPCProtocol, "handle_message", None)), "JsonRPCProtocol.handle_message",
           "refuse requests after shutdown and drop finished futures")  # fmt: skip

    server = LanguageServer("contract", "0", protocol_cls=CpcProtocol)
    protocol = server.protocol
    expect(isinstance(getattr(protocol, "_converter", None), cattrs.Converter), "JsonRPCProtocol._converter",
           "structure incoming messages")  # fmt: skip
    expect(isinstance(getattr(protocol, "_result_types", None), dict), "JsonRPCProtocol._result_types",
           "structure responses to the server's own requests")  # fmt: skip
    expect(isinstance(getattr(protocol, "_request_futures", None), dict), "JsonRPCProtocol._request_futures",
           "drop the futures pygls keeps for finished notifications")  # fmt: skip
    expect(getattr(protocol, "_shutdown", None) is False, "JsonRPCProtocol._shutdown (False until shutdown)",
           "refuse requests after shutdown")  # fmt: skip
    expect(isinstance(getattr(getattr(protocol, "fm", None), "features", None), dict), "protocol.fm.features",
           "forward didOpen/didChange/didClose to the server's handlers only")  # fmt: skip
    for method in (types.TEXT_DOCUMENT_DID_OPEN, types.TEXT_DOCUMENT_DID_CHANGE, types.TEXT_DOCUMENT_DID_CLOSE):
        builtin = protocol.fm.builtin_features.get(method)
        expect(getattr(builtin, "__func__", None) in {f for f in vars(CpcProtocol).values() if callable(f)},
               f"how built-in handlers are found (lsp_method, {method})", "keep documents out of pygls's workspace")  # fmt: skip
    expect(hasattr(server, "_stop_event") and hasattr(server, "_server"), "JsonRPCServer._stop_event / _server",
           "let pygls's shutdown() stop our read loops")  # fmt: skip

    # pygls's shutdown() must stop what serve_stdio/serve_tcp start through those two attributes.
    stop, closed = threading.Event(), []

    class _Tcp:
        def close(self) -> None:
            closed.append(True)

    server._stop_event, server._server = stop, _Tcp()
    server.shutdown()
    expect(stop.is_set() and closed == [True], "JsonRPCServer.shutdown() (sets _stop_event, closes _server)",
           "end serve_stdio and serve_tcp")  # fmt: skip
    return problems

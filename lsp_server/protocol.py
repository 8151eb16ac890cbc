"""pygls's LSP protocol with three corrections: every request gets an answer, and documents are ours.

1. pygls turns a message whose params fail to deserialize into an exception inside the JSON
   object hook (`JsonRPCProtocol.structure_message`), which its read loop logs and drops: the
   client waits forever. Here a request gets an InvalidParams error naming the bad fields (paths,
   never values, which may be document text), and a bad notification is logged and skipped.
   A notification the server must not lose track of (a didChange it cannot apply) is handed to
   `on_unreadable`, so the server can stop trusting that document.
2. pygls ignores a request that arrives after `shutdown`; the spec wants an InvalidRequest error.
   It also keeps the future of every notification its generator handlers run (didChange among
   them) in `_request_futures` for good: a leak of about a kilobyte per keystroke. Finished
   futures are dropped after each message.
3. The built-in didOpen/didChange/didClose handlers would also keep a copy of every document in
   pygls's workspace, with its own line rules; `lsp_server.documents` keeps the one copy used.

Framing errors (bad headers, bodies that are not JSON) are the read loop's job: `transport`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import cattrs
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    ResponseErrorMessage,
)
from pygls.protocol.language_server import lsp_method

logger = logging.getLogger(__name__)


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
            kind = self._result_types.pop(data.get("id"), None) or JsonRPCResponseMessage
            return self._converter.structure(data, kind)
        except Exception as exc:
            logger.warning("ignoring a response that could not be read: %s", type(exc).__name__)
            return _Answered()

    def handle_message(self, message: Any) -> None:
        if isinstance(message, _Answered):
            return
        method = getattr(message, "method", None)
        if self._shutdown and method != types.EXIT and getattr(message, "id", None) is not None and method:
            # pygls drops these silently; the spec says a request after shutdown gets an error.
            self.send_error(message.id, -32600, f"Invalid Request: {method} after shutdown")
            return
        super().handle_message(message)
        self._forget_finished()

    def _forget_finished(self) -> None:
        """Drop finished futures. A request's answer is sent by a callback holding its future, and
        a cancel for a finished request has nothing to cancel, so only the leaked entries go."""
        futures = self._request_futures
        for key in [key for key, future in futures.items() if future.done()]:
            futures.pop(key, None)

    def _user_handler(self, method: str, params: Any):
        if (handler := self.fm.features.get(method)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):
        yield from self._user_handler(types.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        yield from self._user_handler(types.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):
        yield from self._user_handler(types.TEXT_DOCUMENT_DID_CLOSE, params)

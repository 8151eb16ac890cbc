"""What `lsp_server/protocol.py` relies on in pygls's internals still holds (pygls is pinned to
2.1.1; an upgrade that breaks one of these fails here, saying what depends on it), and the bugs it
works around are still there upstream, so the workarounds are still needed."""

from __future__ import annotations

import pytest
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from lsp_server.protocol import contract_problems


def test_the_pygls_internals_protocol_py_uses_are_there():
    problems = contract_problems()
    assert not problems, "\n".join(problems)


def test_pygls_still_drops_a_request_whose_params_do_not_deserialize():
    """docs/upstream/pygls-invalid-params.md: pygls raises inside structure_message, and its read
    loop logs and drops the message. When this fails, pygls answers on its own: CpcProtocol's
    structure_message may go."""
    protocol = LanguageServer("probe", "0").protocol
    bad = {"jsonrpc": "2.0", "id": 1, "method": "textDocument/inlineCompletion",
           "params": {"textDocument": {"uri": "file:///x"}, "position": {"line": "one", "character": 0}}}  # fmt: skip
    with pytest.raises(JsonRpcInvalidParams):
        protocol.structure_message(bad)

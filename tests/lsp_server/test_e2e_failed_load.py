"""A model that cannot load: the user is told what to do, and requests answer instead of hanging."""

from __future__ import annotations

import sys

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

SERVER = [sys.executable, "-m", "lsp_server"]
MISSING = "/nonexistent/cpc-missing.gguf"


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER))
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            initialization_options={"model": MISSING},
        )
    )
    yield
    await lsp_client.shutdown_session()


async def test_failed_load_is_shown_and_requests_answer_empty(client: LanguageClient):
    while not any(m.type == types.MessageType.Error for m in client.messages):
        await client.wait_for_notification(types.WINDOW_SHOW_MESSAGE)
    error = next(m for m in client.messages if m.type == types.MessageType.Error)
    assert MISSING in error.message

    uri = "file:///tmp/cpc-e2e/failed.txt"
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "plaintext", 1, "hello wor"))
    )
    params = types.InlineCompletionParams(
        types.InlineCompletionContext(types.InlineCompletionTriggerKind.Invoked),
        types.TextDocumentIdentifier(uri),
        types.Position(0, 9),
    )
    assert await client.text_document_inline_completion_async(params) == []

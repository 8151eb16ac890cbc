"""What the language server says about a model server (`modelServer`): its name in messages, and
the warning when documents would cross a network in clear.

The engine does the talking (engine/); this module only words things for the user. Nothing here
ever sees the API key.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from engine import EngineConfig, server_urls
from lsp_server import routing


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and "localhost" never leave this machine."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def clear_text_warning(urls: str | None) -> str | None:
    """The warning for a plain http:// URL to another machine (the first of `modelServer`'s URLs
    that is one), else None."""
    for url in server_urls(urls):
        parts = urlsplit(url)
        if parts.scheme == "http" and not is_loopback(parts.hostname or ""):
            return _warning(url)
    return None


def _warning(url: str) -> str:
    parts = urlsplit(url)
    return (
        f"cpc-lsp: modelServer {url} is plain http:// to another machine: the text before your cursor "
        "crosses the network in clear, and so does the API key. Use it only on a network you trust, or "
        f"tunnel it (`ssh -N -L 8080:127.0.0.1:{parts.port or 80} {parts.hostname}`, then modelServer "
        "http://127.0.0.1:8080)."
    )


def model_name(config: EngineConfig) -> str:
    """How messages name what serves suggestions."""
    if config.model_server:
        return f"the model server {config.model_server}"
    if config.model_path:
        return str(config.model_path)
    return f"the default models ({routing.CODE_MODEL} for code, {routing.PROSE_MODEL} for prose)"

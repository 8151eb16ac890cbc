"""What a request to llama-server can force: a grammar literal of the bytes still required."""

from __future__ import annotations

GENERATION_SLACK = 2  # tokens a request may generate beyond what the call wants


def gbnf_literal(text: bytes) -> str | None:
    """`text` as a GBNF string literal; None when it is not valid UTF-8 (a grammar matches
    characters, so a remainder that starts inside a character cannot be written)."""
    try:
        chars = text.decode("utf-8")
    except UnicodeDecodeError:
        return None
    out = []
    for ch in chars:
        code = ord(ch)
        if ch in '"\\' or code < 0x20 or code >= 0x7F:
            out.append(f"\\U{code:08X}" if code > 0xFFFF else f"\\u{code:04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


class Inexpressible(Exception):
    """The remaining bytes start inside a UTF-8 character: no grammar can force them."""

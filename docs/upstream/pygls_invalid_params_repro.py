"""Minimal reproduction: pygls 2.1.1 never answers a request whose params fail to deserialize.

    python pygls_invalid_params_repro.py          # needs only pygls==2.1.1

Starts a pygls server (one hover handler) as a subprocess over stdio, sends one request with a
`position.line` that is a string, then a valid request. Expected: an error response (-32602
InvalidParams) to the first, a result to the second. Seen: no response to the first at all (a
client waits forever), the second is answered.
"""

import json
import subprocess
import sys
import threading
import time

SERVER = """
from lsprotocol import types
from pygls.lsp.server import LanguageServer

server = LanguageServer("repro", "0")

@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls, params):
    return None

server.start_io()
"""


def frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def main() -> int:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    answered: dict = {}

    def read() -> None:
        while True:
            length = None
            while (line := proc.stdout.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length is None:
                return
            message = json.loads(proc.stdout.read(length))
            answered[message.get("id")] = message

    threading.Thread(target=read, daemon=True).start()
    doc = {"uri": "file:///x.txt"}
    send = lambda m: (proc.stdin.write(frame({"jsonrpc": "2.0", **m})), proc.stdin.flush())  # noqa: E731
    send({"id": 1, "method": "initialize", "params": {"capabilities": {}}})
    send({"method": "initialized", "params": {}})
    send(
        {
            "id": 2,
            "method": "textDocument/hover",
            "params": {"textDocument": doc, "position": {"line": "one", "character": 0}},
        }
    )
    send(
        {
            "id": 3,
            "method": "textDocument/hover",
            "params": {"textDocument": doc, "position": {"line": 0, "character": 0}},
        }
    )
    time.sleep(3)
    proc.kill()
    print("response to the bad request (id 2):", answered.get(2))
    print("response to the good request (id 3):", answered.get(3))
    return 0 if 2 in answered else 1  # 1: the bug is there


if __name__ == "__main__":
    sys.exit(main())

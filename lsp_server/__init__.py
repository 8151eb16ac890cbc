"""The cpc-lsp language server: inline suggestions that finish the word being typed.

Modules, one job each: `split` (where the prompt ends), `documents` (texts and LSP positions),
`settings` (validated user settings), `suggestion` (request in, suggestion out), `scheduler`
(the engine's worker thread, newest request wins), `protocol` (pygls corrections), `transport`
(the read loop that survives malformed frames), `server` (the handlers) and `__main__` (the
command line).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("cpc-lsp")
except PackageNotFoundError:  # running from a checkout that is not installed
    __version__ = "0.0.0"

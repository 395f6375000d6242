"""Encoders: the embedded default on real photos, and tiny random CLIP/SigLIP/BLIP checkpoints
saved with ``save_pretrained`` and loaded back through ``create("hf:<folder>")``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from howtocap.encoders import available, create
from howtocap.encoders.base import Encoder
from howtocap.errors import HowtocapError
from tests.support.tiny_models import tiny_checkpoint


@pytest.fixture(scope="session")
def embedded() -> Encoder:
    return create("default")


def _photo(name: str, size: int = 224) -> np.ndarray:
    from PIL import Image
    from skimage import data

    img = Image.fromarray(getattr(data, name)()).convert("RGB")
    w, h = img.size
    s = min(w, h)
    img = img.crop(((w - s) // 2, (h - s) // 2, (w + s) // 2, (h + s) // 2))
    return np.asarray(img.resize((size, size)))


# -- the embedded default ---------------------------------------------------------------------

@pytest.mark.slow
def test_embedded_ranks_the_right_caption_first(embedded: Encoder) -> None:
    assert embedded.name == "default-v1" and embedded.dim == 384
    photos = np.stack([_photo(n) for n in ("coffee", "rocket", "chelsea")])
    captions = ["a cup of coffee", "a rocket launch", "a cat lying on a sofa"]
    img = embedded.encode_images(photos)
    txt = embedded.encode_texts(captions)
    assert img.shape == (3, 384) and txt.shape == (3, 384) and img.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(img, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(txt, axis=1), 1.0, atol=1e-5)
    sims = img @ txt.T
    assert list(sims.argmax(axis=1)) == [0, 1, 2], sims
    # and the image side explains itself through ImageNet classes
    top = embedded.top_classes(photos[:1], k=3)[0]  # type: ignore[attr-defined]
    assert any(c in ("espresso", "coffee mug", "tea cup") for c, _ in top)


@pytest.mark.slow
def test_embedded_batching_invariance_and_trainable_parts(embedded: Encoder) -> None:
    photos = np.stack([_photo(n, 160) for n in ("coffee", "astronaut", "camera")])  # resized
    one = np.concatenate([embedded.encode_images(photos[i:i + 1]) for i in range(3)])
    np.testing.assert_allclose(one, embedded.encode_images(photos, batch_size=3), atol=1e-5)
    texts = ["pour the coffee", "a much longer sentence about putting on the space suit"]
    single = np.concatenate([embedded.encode_texts([t]) for t in texts])
    np.testing.assert_allclose(single, embedded.encode_texts(texts), atol=1e-5)
    # the zero-initialised residual and the temperature receive gradients (fine-tuning works)
    # (towers frozen here only to keep the test fast: backward through them is slow on CPU)
    frozen = [p for m in (embedded.cnn, embedded.text_model)  # type: ignore[attr-defined]
              for p in m.parameters()]
    for p in frozen:
        p.requires_grad_(False)
    embedded.train()
    try:
        emb = embedded.image_features(embedded.preprocess_images(photos[:2]))
        txt = embedded.text_features(embedded.tokenize(texts))
        loss = -torch.nn.functional.cosine_similarity(emb, txt).sum()
        loss.backward()
        res = embedded.residual  # type: ignore[attr-defined]
        # untrained == pure zero-shot composition
        assert float(res.weight.detach().abs().sum()) == 0.0
        assert res.weight.grad is not None and float(res.weight.grad.abs().sum()) > 0
        assert embedded.log_temperature.grad is not None  # type: ignore[attr-defined]
    finally:
        embedded.zero_grad(set_to_none=True)
        embedded.eval()
        for p in frozen:
            p.requires_grad_(True)


# -- tiny Hugging Face checkpoints ---------------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    return {k: tiny_checkpoint(k, root / k) for k in ("clip", "siglip", "blip")}


@pytest.mark.parametrize(("kind", "dim"), [("clip", 24), ("siglip", 32), ("blip", 24)])
def test_hf_backends_load_from_a_saved_folder(tiny_dirs: dict[str, Path], kind: str,
                                              dim: int) -> None:
    enc = create(f"hf:{tiny_dirs[kind]}", device="cpu")
    assert enc.model_type == kind  # type: ignore[attr-defined]
    assert enc.dim == dim and enc.image_size == 32
    assert enc.name.startswith(f"hf:{kind}@") and enc.device.type == "cpu"
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (5, 40, 56, 3), dtype=np.uint8)  # not the model's size
    img = enc.encode_images(frames, batch_size=2)
    assert img.shape == (5, dim) and img.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(img, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(img, enc.encode_images(frames, batch_size=5), atol=1e-5)
    assert not np.allclose(img[0], img[1])  # different frames, different embeddings
    texts = ["a cup", "pour the coffee into a cup", "launch the rocket with the camera"]
    txt = enc.encode_texts(texts)
    assert txt.shape == (3, dim)
    np.testing.assert_allclose(np.linalg.norm(txt, axis=1), 1.0, atol=1e-5)
    # padding must not change an embedding: one at a time == batched
    single = np.concatenate([enc.encode_texts([t]) for t in texts])
    np.testing.assert_allclose(single, txt, atol=1e-5)


@pytest.mark.parametrize("kind", ["clip", "siglip", "blip"])
def test_hf_preprocessing_matches_the_checkpoints_processor(tiny_dirs: dict[str, Path],
                                                            kind: str) -> None:
    from transformers import AutoImageProcessor

    enc = create(f"hf:{tiny_dirs[kind]}")
    frames = np.random.default_rng(1).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    ref = AutoImageProcessor.from_pretrained(tiny_dirs[kind])(
        images=list(frames), return_tensors="pt")["pixel_values"]
    np.testing.assert_allclose(enc.preprocess_images(frames).numpy(), ref.numpy(), atol=1e-4)


def test_hf_name_tracks_the_weights(tiny_dirs: dict[str, Path], tmp_path: Path) -> None:
    same = create(f"hf:{tiny_dirs['clip']}").name
    assert create(f"hf:{tiny_dirs['clip']}").name == same
    other = tiny_checkpoint("clip", tmp_path / "clip", seed=1)  # same folder name, other weights
    assert create(f"hf:{other}").name != same


def test_unknown_and_broken_names_give_one_line_errors(tmp_path: Path) -> None:
    assert available() == ["default", "hf:<id|folder>", "openclip:<arch>/<pretrained>",
                           "<checkpoint.pt>"]
    with pytest.raises(HowtocapError) as err:
        create("clip-large")
    msg = str(err.value)
    assert msg == ("unknown encoder 'clip-large'; choose one of: default, hf:<id|folder>, "
                   "openclip:<arch>/<pretrained>, <checkpoint.pt>")
    with pytest.raises(HowtocapError, match="cannot load Hugging Face model") as err:
        create(f"hf:{tmp_path}/nothing-here")
    assert "\n" not in str(err.value)
    with pytest.raises(HowtocapError, match="does not exist"):
        create(str(tmp_path / "missing.pt"))
    with pytest.raises(HowtocapError, match="expected openclip:<arch>/<pretrained>"):
        create("openclip:ViT-B-32")
    if importlib.util.find_spec("open_clip") is None:
        with pytest.raises(HowtocapError, match=r"pip install 'howtocap\[openclip\]'"):
            create("openclip:ViT-B-32/laion2b_s34b_b79k")


def test_checkpoints_dispatch_to_the_training_loader(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import howtocap.encoders as encoders

    calls: list[tuple[str, object]] = []

    def load_encoder(path: str, device: object) -> str:
        calls.append((path, device))
        return "loaded"

    monkeypatch.setattr(encoders, "load_encoder", load_encoder)
    pt = tmp_path / "model.pt"
    pt.write_bytes(b"x")
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "howtocap_checkpoint.json").write_text("{}")
    assert create(str(pt)) == "loaded" and create(str(folder), device="cpu") == "loaded"
    assert calls == [(str(pt), None), (str(folder), "cpu")]

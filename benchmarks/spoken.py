"""Spoken-style narration from YouCook2's human step annotations: the caption benchmark's input.

Run: python benchmarks/spoken.py              -> benchmarks/data/spoken_youcook2.json
     python benchmarks/spoken.py --extract F  -> benchmarks/data/youcook2_subset.json from the
                                                 official youcookii_annotations_trainval.json F
                                                 (with label_foodtype.csv beside it)

Why: the old fixture's references were written here, in the style of one template, so it could
only confirm its author. Here the references are YouCook2's (written by annotators who never
saw a template) and only the *narration* is made up, by a seeded procedure that uses no
template's output style: lower case, first person, run-ons, fillers, restarts, asides and
channel chatter, as Whisper transcribes a home cook talking.

For each video (seeded by ``SEED`` and the video id, so one video's text never depends on
another's), in step order:
- ~10 % of the steps are never spoken (the cook works silently; at most a third of a video);
- a spoken step's sentence gets a spoken frame ("so now i'm gonna …", "what we're doing here
  is …ing", "you want to …"; the verb inflected with lemminflect), maybe a hedge ("kind of",
  "a little bit"), "um"/"uh"/"you know" between words, a restart ("so we- so we add"), a glued
  filler sentence (a run-on), and a long step may be split over two lines at an "and";
- between steps: pure filler/meta lines with no visible action ("so yeah let's see"), asides
  and stories about the food or the kitchen, and channel chatter (intro, sponsor, subscribe,
  sign-off);
- times: a step's lines share its annotated segment, the first starting up to 1.5 s before it
  (never before the previous step's lines); other lines sit in the gaps or in the tail of the
  neighbouring segment; nothing ends past the video's duration.
Every line is labelled with ``kind`` (step, filler, chatter, aside) and the ``step`` id it
speaks (null unless ``kind`` is step). Splits are by recipe type (no recipe in two splits):
``report`` (the numbers the default is chosen by), ``tune`` (prompts, grammar and filters are
tuned here) and ``extra`` (more labelled narration, e.g. for filler rejection; never used to
choose a caption default).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import random
import re
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lemminflect import getAllLemmas, getInflection

HERE = Path(__file__).resolve().parent
SUBSET = HERE / "data" / "youcook2_subset.json"
OUT = HERE / "data" / "spoken_youcook2.json"
SEED = 20  # issue #20
RECIPE_TYPES = 24  # recipe types in the subset, two videos each
VIDEOS_PER_RECIPE = 2
SPLIT_RECIPES = {"report": 7, "tune": 4}  # the rest are "extra"
MIN_STEPS, MAX_STEPS = 5, 10  # keeps a video at 1-3 LLM blocks of 200 words
MAX_DURATION = 420.0
WORDS_PER_SECOND = 2.6  # a home cook's pace
UNSPOKEN = 0.10
SOURCE = ("YouCook2 (Zhou, Xu and Corso, AAAI 2018), youcookii_annotations_trainval.json and "
          "label_foodtype.csv from the public CC0 copy github.com/ascott02/youcookIIexplorer "
          "(commit b4f8c5fa28a4dbc66d8ad0038115b0816a4620d5); annotations copied verbatim")

# Spoken frames for a verb-initial step: {v} = the sentence as is (imperative), {ing} = its
# verb in -ing form.
FRAMES_BASE = ("so now i'm gonna {v}", "now we're gonna {v}", "and then you {v}", "next we {v}",
               "you want to {v}", "okay so {v}", "we're gonna go ahead and {v}",
               "so basically you just {v}", "and now i {v}", "then you wanna {v}",
               "alright so let's {v}", "i like to {v}", "{v}", "so {v}")
FRAMES_ING = ("what we're doing here is {ing}", "i'm just {ing}", "so now i'm {ing}",
              "and here i'm {ing}", "we're {ing}", "so we start by {ing}")
FRAMES_OTHER = ("so {s}", "and {s}", "now {s}", "okay {s}", "{s}", "and then {s}")
HEDGES_AFTER = (" a little bit", " kind of like that", " just like this", " for a bit",
                " like so", " you know", " or whatever", " pretty much")
HEDGES_BEFORE = ("kind of ", "just ", "sort of ", "gently ", "quickly ")
WORD_FILLERS = ("um", "uh", "um", "uh", "you know", "like")
GLUE_BEFORE = ("okay", "alright", "so yeah", "okay so", "right", "oh and")
GLUE_AFTER = ("perfect", "there we go", "looks good", "that's it", "nice", "easy",
              "see that", "and that's that")
FILLERS = ("so yeah let's see", "okay hang on a second", "take your time",
           "let me know what you think", "alright", "okay so yeah", "where was i",
           "bear with me here", "let's see here", "oh boy", "okay cool", "no rush",
           "give it a minute", "hmm okay", "this is gonna take a while", "i'll be right back",
           "so that's pretty much it for that part", "yeah", "anyway", "okay let's keep going",
           "let me just check", "wait a second", "okay where's my", "so yeah that's about it",
           "you'll see what i mean")
ASIDES = ("my grandma used to make {food} every sunday", "honestly {food} is one of my "
          "favorite things to make", "i first had this on a trip with my sister years ago",
          "my kids absolutely love this one", "this knife is like fifteen years old",
          "i know some people don't do it this way but trust me",
          "the kitchen smells amazing right now", "i actually burned the first batch yesterday",
          "we had {food} at a wedding last month and i had to figure it out",
          "it's freezing here today so this is perfect", "my husband always steals a piece "
          "at this point", "you can find most of this at any grocery store",
          "funny story the first time i made this i forgot the salt",
          "my mom would kill me if she saw this", "i got this pan at a garage sale",
          "back in college i lived on {food}", "the dog is watching me right now",
          "i've been making {food} for like ten years")
INTRO = ("hey guys welcome back to my channel", "hi everyone and welcome to my kitchen",
         "what's up everybody", "today i'm gonna show you how to make {food}",
         "today we're making {food}", "hello and welcome back")
MIDROLL = ("if you're new here make sure to subscribe", "hit the like button if you're "
           "enjoying this", "this video is sponsored by skillshare link in the description",
           "use code cook ten for ten percent off", "check out my other videos for more "
           "recipes", "all the ingredients are listed in the description box")
OUTRO = ("thanks so much for watching", "see you in the next video",
         "don't forget to subscribe and hit the bell", "leave a comment down below",
         "bye guys", "that's it for today", "let me know in the comments how it turned out")

_CLEAN = re.compile(r"[^a-z0-9' ]+")


def video_rng(seed: int, video_id: str) -> random.Random:
    """One stream per video: a video's narration never depends on the others'."""
    return random.Random(seed * 1_000_003 + zlib.crc32(video_id.encode()))


def clean(sentence: str) -> str:
    """Whisper-like: lower case, no punctuation but apostrophes ("1/2" -> "1 2")."""
    return " ".join(_CLEAN.sub(" ", sentence.lower()).split())


def is_verb(word: str) -> bool:
    return "VERB" in getAllLemmas(word) and word not in ("the", "a", "an", "some")


def gerund(sentence: str) -> str:
    first, _, rest = sentence.partition(" ")
    ing = getInflection(first, "VBG")
    return " ".join(x for x in (ing[0] if ing else first + "ing", rest) if x)


def frame(rng: random.Random, sentence: str) -> str:
    """The step said in the first person (or as a plain instruction), maybe hedged."""
    if not is_verb(sentence.split()[0]):
        return rng.choice(FRAMES_OTHER).format(s=sentence)
    hedge = rng.choice(HEDGES_BEFORE) if rng.random() < 0.2 else ""
    if rng.random() < 0.3:
        line = rng.choice(FRAMES_ING).format(ing=hedge + gerund(sentence))
    else:
        line = rng.choice(FRAMES_BASE).format(v=hedge + sentence)
    if rng.random() < 0.3:
        line += rng.choice(HEDGES_AFTER)
    return line


def disfluent(rng: random.Random, line: str) -> str:
    """Fillers between words and, sometimes, a restart of the first two words."""
    words = line.split()
    out: list[str] = []
    for i, w in enumerate(words):
        if i > 0 and rng.random() < 0.05:
            out.append(rng.choice(WORD_FILLERS))
        out.append(w)
    if len(out) > 4 and rng.random() < 0.15:
        out = [*out[:1], out[1] + "-", *out]
    return " ".join(out)


def split_long(rng: random.Random, line: str) -> list[str]:
    """A long step is sometimes transcribed over two lines, cut at an 'and'."""
    words = line.split()
    ands = [i for i, w in enumerate(words) if w == "and" and 4 <= i <= len(words) - 3]
    if len(words) < 14 or not ands or rng.random() < 0.5:
        return [line]
    cut = rng.choice(ands)
    return [" ".join(words[:cut]), " ".join(words[cut:])]


def step_lines(rng: random.Random, sentence: str) -> list[str]:
    lines = split_long(rng, disfluent(rng, frame(rng, clean(sentence))))
    r = rng.random()
    if r < 0.12:  # a run-on: a filler sentence glued before or after, as Whisper does
        lines[0] = f"{rng.choice(GLUE_BEFORE)} {lines[0]}"
    elif r < 0.25:
        lines[-1] = f"{lines[-1]} {rng.choice(GLUE_AFTER)}"
    return lines


def _n_words(text: str) -> int:
    return len(text.split())


def place(items: list[tuple[str, str, int | None]], lo: float, hi: float,
          duration: float) -> list[dict[str, Any]]:
    """Spread lines over [lo, hi] in order: each starts at its share of the span and lasts
    its words' speaking time, cut at the next line's start and at the video's end."""
    lo, hi = max(0.0, lo), min(duration, hi)
    if hi - lo < 0.5:
        lo = max(0.0, hi - 0.5)
    span = (hi - lo) / len(items)
    out = []
    for i, (text, kind, step) in enumerate(items):
        start = lo + i * span
        end = min(start + _n_words(text) / WORDS_PER_SECOND, lo + (i + 1) * span, duration)
        out.append({"start": round(start, 2), "end": round(max(end, start + 0.01), 2),
                    "text": text, "kind": kind, "step": step})
    return out


def narrate(video: dict[str, Any], seed: int) -> tuple[list[dict], list[dict]]:
    """(steps with their ``spoken`` flag, labelled lines) for one subset video."""
    rng = video_rng(seed, video["video_id"])
    food, duration = video["food"], float(video["duration"])
    anns = video["annotations"]
    silent = {a["id"] for a in anns if rng.random() < UNSPOKEN}
    while len(silent) > len(anns) // 3:
        silent.discard(max(silent))
    steps = [{"id": a["id"], "start": float(a["segment"][0]), "end": float(a["segment"][1]),
              "sentence": a["sentence"], "spoken": a["id"] not in silent} for a in anns]
    lines: list[dict[str, Any]] = []
    intro = [(rng.choice(INTRO[:3]), "chatter", None)] if rng.random() < 0.8 else []
    if rng.random() < 0.8:
        intro.append((rng.choice(INTRO[3:]).format(food=food), "chatter", None))
    outro = [(t, "chatter", None) for t in rng.sample(OUTRO, rng.choice((0, 1, 2, 2)))]
    mid_at = rng.randrange(len(steps)) if rng.random() < 0.4 else -1
    prev_end = 0.0
    first = min(s["start"] for s in steps)
    if intro and first >= 2.0:  # room before the first step
        lines += place(intro, 0.0, min(first, 2.0 + 3.0 * len(intro)), duration)
        prev_end, intro = min(first, 2.0 + 3.0 * len(intro)), []
    for k, step in enumerate(steps):
        items: list[tuple[str, str, int | None]] = list(intro)
        intro = []
        if step["spoken"]:
            if rng.random() < 0.15:
                items.append((rng.choice(FILLERS), "filler", None))
            items += [(t, "step", step["id"]) for t in step_lines(rng, step["sentence"])]
        r = rng.random()
        if r < 0.25:
            items.append((rng.choice(FILLERS), "filler", None))
        elif r < 0.45:
            items.append((rng.choice(ASIDES).format(food=food), "aside", None))
        if k == mid_at:
            items.append((rng.choice(MIDROLL), "chatter", None))
        if k == len(steps) - 1 and outro and duration - step["end"] < 3.0:
            items += outro  # no room after the last step: the sign-off runs over it
            outro = []
        if not items:
            continue
        lead = rng.uniform(0.0, 1.5)
        lo = max(prev_end, step["start"] - lead)
        hi = max(step["end"], lo + 1.0)
        lines += place(items, lo, hi, duration)
        prev_end = min(hi, duration)
    if outro:
        lines += place(outro, prev_end + 0.5, min(duration, prev_end + 0.5 + 3.0 * len(outro)),
                       duration)
    return steps, lines


def load_subset(path: Path = SUBSET) -> dict[str, Any]:
    return json.loads(path.read_text())


def generate(subset: dict[str, Any], seed: int = SEED) -> dict[str, Any]:
    """The benchmark set: every subset video narrated, with its split."""
    split_of = {r: s for s, recipes in subset["splits"].items() for r in recipes}
    videos, splits = [], {s: [] for s in subset["splits"]}
    for v in subset["videos"]:
        steps, lines = narrate(v, seed)
        split = split_of[v["recipe_type"]]
        splits[split].append(v["video_id"])
        videos.append({"video_id": v["video_id"], "split": split,
                       "recipe_type": v["recipe_type"], "food": v["food"],
                       "duration": v["duration"], "steps": steps, "lines": lines})
    return {"about": ("Spoken-style narration generated by benchmarks/spoken.py from YouCook2's "
                      "human step annotations (the references). Lines are labelled: kind in "
                      "step/filler/chatter/aside, step = the annotation id a step line speaks. "
                      "Splits are by recipe type: choose defaults on 'report', tune on 'tune'; "
                      "'extra' is more labelled narration never used to choose a default."),
            "source": SOURCE, "seed": seed, "splits": splits, "videos": videos}


def extract(trainval: Path, foods: Path, seed: int = SEED) -> dict[str, Any]:
    """A seeded subset: RECIPE_TYPES recipe types, VIDEOS_PER_RECIPE videos each with
    MIN_STEPS..MAX_STEPS steps, split by recipe type; annotations verbatim."""
    db = json.loads(trainval.read_text())["database"]
    names = {row[0]: row[1] for row in csv.reader(io.StringIO(foods.read_text())) if row}
    rng = random.Random(seed)
    by_recipe: dict[str, list[str]] = {}
    for vid in sorted(db):
        v = db[vid]
        if MIN_STEPS <= len(v["annotations"]) <= MAX_STEPS and v["duration"] <= MAX_DURATION:
            by_recipe.setdefault(v["recipe_type"], []).append(vid)
    recipes = sorted(r for r, vids in by_recipe.items() if len(vids) >= VIDEOS_PER_RECIPE)
    chosen = rng.sample(recipes, RECIPE_TYPES)
    splits: dict[str, list[str]] = {}
    at = 0
    for name, n in (*SPLIT_RECIPES.items(), ("extra", RECIPE_TYPES - sum(SPLIT_RECIPES.values()))):
        splits[name] = sorted(chosen[at:at + n])
        at += n
    videos = []
    for r in sorted(chosen):
        for vid in sorted(rng.sample(by_recipe[r], VIDEOS_PER_RECIPE)):
            v = db[vid]
            videos.append({"video_id": vid, "recipe_type": r, "food": names[r],
                           "duration": v["duration"], "subset": v["subset"],
                           "video_url": v["video_url"], "annotations": v["annotations"]})
    return {"about": (f"A seeded subset (seed {seed}) of YouCook2's trainval annotations: "
                      f"{RECIPE_TYPES} recipe types, {VIDEOS_PER_RECIPE} videos each "
                      f"({MIN_STEPS}-{MAX_STEPS} steps, <= {MAX_DURATION:.0f} s), split by "
                      "recipe type. Made by `python benchmarks/spoken.py --extract`."),
            "source": SOURCE,
            "licence": "CC0 1.0 (the copy's LICENSE); YouCook2's annotations are released "
                       "for research use; cite Zhou et al., AAAI 2018.",
            "seed": seed, "splits": splits, "videos": videos}


def dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--extract", type=Path, metavar="TRAINVAL_JSON",
                    help="rebuild the subset from youcookii_annotations_trainval.json "
                         "(label_foodtype.csv beside it, or --foods)")
    ap.add_argument("--foods", type=Path, help="label_foodtype.csv")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.extract:
        foods = args.foods or args.extract.with_name("label_foodtype.csv")
        SUBSET.write_text(dump(extract(args.extract, foods, args.seed)))
        print(f"wrote {SUBSET}")
    data = generate(load_subset(), args.seed)
    args.out.write_text(dump(data))
    n_lines = sum(len(v["lines"]) for v in data["videos"])
    print(f"wrote {args.out}: {len(data['videos'])} videos, {n_lines} lines, splits "
          + ", ".join(f"{k} {len(v)}" for k, v in data["splits"].items()))


if __name__ == "__main__":
    main()

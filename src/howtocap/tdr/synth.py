"""A generated TDR dataset with known answers: narrated videos of three goals, YouCook2-format
annotations with key objects, and several instructional scripts per goal.

Some narrations refer to the step's object only by a pronoun ("now let it brew") although an
earlier step named it: those frames are *degenerate* in the paper's sense, and only the image,
the neighbouring frames, or a retrieved script sentence can tell which object is meant. Each
goal also has an *isolated* step whose key objects no neighbour shares.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from howtocap.atomic import atomic_write_text
from howtocap.errors import HowtocapError
from howtocap.samples import make_narrated_video


@dataclass(frozen=True)
class SynthStep:
    image: str  # scikit-image photograph shown during the step
    caption: str  # gold caption (YouCook2 "sentence")
    key_objects: tuple[str, ...]  # nouns of the caption, as spaCy lemmatises them
    named: str  # narration that names the object
    pronoun: str | None  # narration that only says "it" (degenerate), if the step has one
    paraphrases: tuple[str, str, str]  # how three different scripts word the step


GOALS: dict[str, list[SynthStep]] = {
    "coffee": [
        SynthStep("coffee", "grind the coffee beans", ("coffee", "bean"),
                  "First, grind the coffee beans until they are fine.", None,
                  ("Grind the beans for the coffee finely.",
                   "Use a grinder on the coffee beans.",
                   "Crush the coffee beans into a fine powder.")),
        SynthStep("clock_motion", "brew the coffee for four minutes", ("coffee", "minute"),
                  "Now brew the coffee for about four minutes.",
                  "Now just let it sit like that for a while.",
                  ("Let the coffee steep for four minutes.",
                   "Brew the ground coffee for four minutes.",
                   "Wait four minutes while the coffee brews.")),
        SynthStep("page", "read the recipe on the page", ("recipe", "page"),
                  "While you wait, read the recipe on the page.", None,
                  ("Check the recipe printed on the page.",
                   "Look at the page with the recipe.",
                   "Follow the recipe written on the page.")),
        SynthStep("camera", "photograph the coffee with the camera", ("coffee", "camera"),
                  "Finally, photograph the coffee with the camera.",
                  "Finally, get a nice shot of it.",
                  ("Take a picture of the coffee with a camera.",
                   "Photograph your finished coffee with the camera.",
                   "Use the camera to capture the coffee.")),
    ],
    "space": [
        SynthStep("astronaut", "put on the space suit", ("space", "suit"),
                  "First, put on the space suit and close it.", None,
                  ("Dress in the space suit.",
                   "Put the space suit on carefully.",
                   "Zip up the space suit before boarding.")),
        SynthStep("rocket", "fuel the rocket on the launch pad", ("rocket", "launch", "pad"),
                  "Next, fuel the rocket on the launch pad.", None,
                  ("Fill the rocket with fuel on the launch pad.",
                   "Fuel up the rocket at the launch pad.",
                   "Pump fuel into the rocket on the pad.")),
        SynthStep("moon", "fly the rocket to the moon", ("rocket", "moon"),
                  "Then fly the rocket all the way to the moon.",
                  "Then fly it all the way up there.",
                  ("Steer the rocket toward the moon.",
                   "Pilot the rocket to the moon.",
                   "Travel by rocket until you reach the moon.")),
        SynthStep("hubble_deep_field", "photograph the stars with the telescope",
                  ("star", "telescope"),
                  "Finally, photograph the stars with the telescope.", None,
                  ("Take pictures of the stars through the telescope.",
                   "Point the telescope at the stars and photograph them.",
                   "Capture the stars with the telescope.")),
    ],
    "pets": [
        SynthStep("chelsea", "brush the cat from head to tail", ("cat", "head", "tail"),
                  "Start by brushing the cat from head to tail.", None,
                  ("Comb the cat gently from head to tail.",
                   "Brush the fur of the cat from head to tail.",
                   "Groom the cat with a brush, head to tail.")),
        SynthStep("coins", "pay the vet with coins", ("vet", "coin"),
                  "Then pay the vet with a few coins.", None,
                  ("Give the vet some coins as payment.",
                   "Pay the vet in coins.",
                   "Count out coins to pay the vet.")),
        SynthStep("horse", "lead the horse into the field", ("horse", "field"),
                  "Now lead the horse out into the field.", None,
                  ("Walk the horse into the field.",
                   "Take the horse out to the field.",
                   "Guide the horse into the open field.")),
        SynthStep("grass", "feed the horse fresh grass", ("horse", "grass"),
                  "Feed the horse some fresh grass.",
                  "Give it some of that, it loves it.",
                  ("Let the horse eat fresh grass.",
                   "Offer the horse a pile of fresh grass.",
                   "Feed fresh grass to the horse.")),
    ],
}

DISTRACTORS: dict[str, list[str]] = {
    "coffee": ["Buy a new kettle online.", "Clean the grinder every week.",
               "Store the mugs in a dry cupboard."],
    "space": ["Wave goodbye to the crowd.", "Read the mission manual twice.",
              "Sign the paperwork at mission control."],
    "pets": ["Wash your hands afterwards.", "Call the stable in the morning.",
             "Write the appointment in your calendar."],
}


@dataclass
class TdrSampleSet:
    videos_dir: Path
    annotations: Path
    scripts: Path
    video_ids: list[str]


def _scripts(rng: random.Random, n_scripts: int) -> dict[str, list[list[str]]]:
    """``n_scripts`` per goal: each words every step with one paraphrase, in order, with one or
    two distractor sentences slipped in."""
    out: dict[str, list[list[str]]] = {goal: [] for goal in GOALS}
    for goal, steps in GOALS.items():
        for j in range(n_scripts):
            sents = [s.paraphrases[j] if j < 3 else rng.choice(s.paraphrases) for s in steps]
            for d in rng.sample(DISTRACTORS[goal], rng.choice([1, 2])):
                sents.insert(rng.randrange(len(sents) + 1), d)
            out[goal].append(sents)
    return out


def make_tdr_set(out_dir: str | Path, *, videos_per_goal: int = 2, seconds_per_step: float = 9.0,
                 pronoun_rate: float = 0.6, n_scripts: int = 3, audio: bool = False,
                 size: int = 128, validation_share: float = 0.34, vary: bool = True,
                 seed: int = 0) -> TdrSampleSet:
    """Write ``videos/<vid>.mp4`` (+ ``.vtt`` narration), ``annotations.json`` (YouCook2 form,
    with ``key_objects``) and ``scripts.json`` under ``out_dir``. Per goal, the last
    ``validation_share`` of its videos are ``validation`` (at least one of each split when
    ``videos_per_goal`` >= 2). ``vary``: half the videos skip one step and step lengths vary
    (0.75-1.25x), so a frame's position alone does not tell its step.
    """
    if videos_per_goal < 1 or n_scripts < 1 or not 0 <= pronoun_rate <= 1:
        raise HowtocapError("videos_per_goal and n_scripts must be >= 1, pronoun_rate in [0, 1]")
    out = Path(out_dir)
    vdir = out / "videos"
    rng = random.Random(seed)
    n_val = max(1, round(videos_per_goal * validation_share)) if videos_per_goal >= 2 else 0
    db: dict[str, dict[str, object]] = {}
    for goal in GOALS:
        for v in range(videos_per_goal):
            vid = f"tdr_{goal}_{v:02d}"
            steps = list(GOALS[goal])
            if vary and rng.random() < 0.5:  # some videos skip a step: position is no answer
                steps.pop(rng.randrange(len(steps)))
            spoken = [s.pronoun if s.pronoun and rng.random() < pronoun_rate else s.named
                      for s in steps]
            spp = seconds_per_step * (rng.choice([0.75, 1.0, 1.25]) if vary else 1.0)
            video = make_narrated_video(vdir, vid, [(s.image, t, s.caption)
                                                    for s, t in zip(steps, spoken, strict=True)],
                                        seconds_per_step=spp, audio=audio,
                                        size=size, subtitles="vtt", seed=seed)
            db[vid] = {
                "recipe_type": goal, "duration": video.duration, "video_url": "",
                "subset": "validation" if v >= videos_per_goal - n_val else "training",
                "annotations": [
                    {"id": i, "segment": [st.start, st.end], "sentence": s.caption,
                     "key_objects": list(s.key_objects),
                     "degenerate": spoken[i] == s.pronoun}
                    for i, (s, st) in enumerate(zip(steps, video.steps, strict=True))],
            }
    ann = out / "annotations.json"
    atomic_write_text(ann, json.dumps({"database": db}, indent=1))
    scripts = out / "scripts.json"
    atomic_write_text(scripts, json.dumps(_scripts(rng, n_scripts), indent=1))
    return TdrSampleSet(vdir, ann, scripts, list(db))

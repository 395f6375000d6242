"""Channel chatter that is never a visual action: greetings, "like and subscribe", sponsors.

The paper's prompt asks the LLM to "keep only actions that happen in the present time"; small
models still turn "don't forget to subscribe" into a caption now and then. These patterns are
a last, transparent safety net after parsing (``--keep-chatter`` turns it off). They match
phrases that name the channel's business (subscribing, commenting, sponsors, the video
itself), never cooking or repair verbs, so "Like this, fold the edge." is kept.
"""

from __future__ import annotations

import hashlib
import re

_PATTERNS = [
    r"\bsubscrib",
    r"\b(?:like|thumbs up)\b.{0,30}\b(?:video|channel|subscribe)\b",
    r"\bsmash\b.{0,20}\blike\b",
    r"\b(?:hit|ring|click|tap|turn on)\b.{0,20}\b(?:bell|notification)",
    r"\b(?:leave|drop|write|post)\b.{0,25}\bcomments?\b",
    r"\bcomments? (?:section|below|down below)\b",
    r"\blet (?:me|us) know (?:in|down)\b",
    r"\b(?:thanks|thank you)\b.{0,15}\b(?:watching|tuning in|joining)\b",
    r"\bwelcome (?:back|to (?:my|the|our) (?:channel|kitchen|garage|shop|video))\b",
    r"^(?:hey|hi|hello)\b.{0,20}\b(?:guys|everyone|everybody|folks|there|friends)\b",
    r"\b(?:see you|catch you)\b.{0,20}\b(?:next|later|soon|time)\b",
    r"\blinks?\b.{0,25}\bdescription\b",
    r"\bdescription box\b",
    r"\bcheck out (?:my|our|the) (?:other )?(?:videos?|channel|playlist|website|store|shop)\b",
    r"\b(?:sponsor(?:ed)?|patreon|affiliate|promo code|discount code)\b",
    r"\buse (?:the |my |our )?code\b.{0,30}\b(?:off|discount|percent)\b",
    r"\bfollow (?:me|us)\b.{0,25}\b(?:on|instagram|twitter|tiktok|facebook)\b",
    r"\b(?:this|today'?s|in this|the next|my last) video\b",
    r"^(?:start|watch|share|enjoy)\b.{0,12}\bvideo\b",
    r"\bsmash\b.{0,15}\bbutton\b",
    r"\bleft (?:me |us )?a comment\b",
    r"\bin the comments\b|\bcomment below\b",
    r"\bshout[- ]?out\b",
    # Sign-offs and digressions: never a step someone could film.
    r"^(?:and |so |okay |ok )?that'?s (?:it|all)(?: for (?:today|now))?\W*$",
    r"^(?:uh |um |oh )?sorry\b",
    r"\btrust me\b",
    r"\bso satisfying\b",
    r"\bfunny story\b",
    r"\b(?:\d+|a few|fifteen|ten|twenty|five) bucks\b|\bnot sponsored\b",
]


def _union(patterns: list[str]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)


_CHATTER = _union(_PATTERNS)
# In the caption stage's fingerprint: other patterns drop other captions.
RULES_ID = hashlib.sha256("\n".join(_PATTERNS).encode()).hexdigest()[:12]
# Words without which no pattern above can match (each pattern holds one of them literally,
# lower case): an ASCII caption holding none is not chatter, and is known so without the
# regex, which tries all its alternatives at every character. A new pattern needs its word
# here (tests/caption/test_chatter.py checks).
_NEEDS = ("subscrib", "like", "thumbs up", "smash", "bell", "notification", "comment", "know",
          "thank", "welcome", "guys", "every", "folks", "there", "friends", "see you",
          "catch you", "description", "check out", "sponsor", "patreon", "affiliate",
          "code", "follow ", "video", "shout", "that's", "thats", "sorry", "trust me",
          "so satisfying", "funny story", "bucks")  # "code": also "promo/discount code"


# Per prefilter word, one regex of the patterns that spell it literally; and the patterns that
# spell none (always tried). A pattern's match holds one of its words (test_chatter.py generates
# matches of every pattern), so an ASCII caption is tried against its words' patterns alone.
_BY_WORD = [(w, _union(ps)) for w in _NEEDS if (ps := [p for p in _PATTERNS if w in p])]
_REST = [p for p in _PATTERNS if not any(w in p for w in _NEEDS)]
_ALWAYS = _union(_REST) if _REST else None


def is_chatter(text: str) -> bool:
    """True when a caption is about the channel rather than the task."""
    if text.isascii():  # ASCII: IGNORECASE is lower(); other text goes to the regex as it is
        low = text.lower()
        if not any(map(low.__contains__, _NEEDS)):
            return False
        # only the regexes of the words it holds: "like", "know", "there" or "video" are in
        # many steps
        if _ALWAYS is not None and _ALWAYS.search(text):
            return True
        return any(rx.search(text) for w, rx in _BY_WORD if w in low)
    return bool(_CHATTER.search(text))


def may_hold_chatter(reply: str) -> bool:
    """False when no caption parsed from ``reply`` can be chatter, known for the whole reply
    at once: an ASCII reply that holds none of the prefilter words once ``**`` is dropped and
    the whitespace runs within a line are one space. The parser cuts each caption out of one
    line, drops list markers, quotes, ``**``, edge punctuation and a trailing timestamp, and
    folds spaces: none of that can make a word appear. Saves the check per caption (~40 a
    video)."""
    if not reply.isascii():
        return True
    low = reply.lower()
    # Within a line, only "**", a double space, a tab or \x1f (whitespace that splits no
    # line) can part a word of _NEEDS that a caption holds whole; without them the reply is
    # searched as it is (folding its spaces cost a third of this check).
    if "**" in low or "  " in low or "\t" in low or "\x1f" in low:
        low = " ".join(low.replace("**", "").split())
    return any(map(low.__contains__, _NEEDS))

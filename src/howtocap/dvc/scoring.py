"""Caption scorers of the COCO caption toolkit (pycocoevalcap), with and without Java: METEOR
1.5 and the Stanford PTB tokenizer are Java subprocesses; without Java, METEOR is ``None``, a
pure-Python approximation of PTB tokenisation is used, and the result says so."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

# What the toolkit's PTB wrapper drops after tokenising (PTB's own spellings of punctuation).
PTB_PUNCTUATION = frozenset({"''", "'", "``", "`", "-lrb-", "-rrb-", "-lcb-", "-rcb-", ".", "?",
                             "!", ",", ":", "-", "--", "...", ";"})
_BRACKETS_QUOTES = frozenset('"(){}')  # PTB turns these into -LRB-, `` etc., then dropped
_CLITIC = re.compile(r"(?i)^(.+?)(n't|'s|'re|'ve|'ll|'d|'m)$")
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:[-'./][A-Za-z0-9]+)*|\.\.\.|--|[^\sA-Za-z0-9]")


def java_path() -> str | None:
    """The ``java`` on PATH, looked up at call time (tests and users may change PATH)."""
    return shutil.which("java")


def ascii_only(text: str) -> str:
    """Non-ASCII characters become spaces, as the ActivityNet evaluation does before scoring."""
    return "".join(c if ord(c) < 128 else " " for c in text)


def python_tokenize(text: str) -> str:
    """A pure-Python stand-in for Stanford PTB tokenisation + the toolkit's punctuation removal:
    lower-cased, clitics split (``don't`` -> ``do n't``), punctuation dropped."""
    parts = [p for tok in _TOKEN.findall(text.replace("\n", " ").lower())
             for m in [_CLITIC.match(tok)] for p in (m.groups() if m else (tok,))]
    return " ".join(p for p in parts if p not in PTB_PUNCTUATION and p not in _BRACKETS_QUOTES)


def ptb_tokenize(sentences: list[str], java: str) -> list[str]:
    """Stanford PTB tokenisation (the jar inside pycocoevalcap), one line per sentence; unlike
    the toolkit's wrapper, not writing into site-packages, so a read-only install works."""
    from pycocoevalcap.tokenizer import ptbtokenizer

    jar = Path(ptbtokenizer.__file__).with_name(ptbtokenizer.STANFORD_CORENLP_3_4_1_JAR)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "sentences.txt"
        src.write_text("\n".join(s.replace("\n", " ").replace("\r", " ") for s in sentences),
                       encoding="utf-8")
        proc = subprocess.run([java, "-cp", str(jar), "edu.stanford.nlp.process.PTBTokenizer",
                               "-preserveLines", "-lowerCase", str(src)],
                              capture_output=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.decode(errors="replace").strip().splitlines()[-1:]
                           or f"exit code {proc.returncode}")
    lines = proc.stdout.decode(errors="replace").split("\n")
    if len(lines) < len(sentences):
        raise RuntimeError(f"PTB tokenizer returned {len(lines)} lines for {len(sentences)}")
    return [" ".join(w for w in line.rstrip().split(" ") if w not in PTB_PUNCTUATION
                     and w.lower() not in PTB_PUNCTUATION)
            for line in lines[:len(sentences)]]


class Scorers:
    """BLEU-1..4, METEOR (when Java runs), ROUGE-L and CIDEr over tokenised caption pairs.
    METEOR's JVM takes seconds to start: one instance serves every video and threshold."""

    def __init__(self, meteor: bool, java: str | None) -> None:
        from pycocoevalcap.bleu.bleu import Bleu
        from pycocoevalcap.cider.cider import Cider
        from pycocoevalcap.rouge.rouge import Rouge

        self.warnings: list[str] = []
        self._bleu, self._rouge, self._cider = Bleu(4), Rouge(), Cider()
        self._meteor: Any = None
        self.meteor_name: str | None = None
        if meteor and java is not None:  # no Java: the caller says so, once
            try:
                from pycocoevalcap.meteor.meteor import Meteor

                self._meteor = Meteor()
                self.meteor_name = "METEOR 1.5 (pycocoevalcap, Java)"
            except OSError as exc:
                self.warnings.append(f"METEOR could not start ({exc}); reported as null")

    def score(self, gts: dict[int, list[str]],
              res: dict[int, list[str]]) -> dict[str, float | None]:
        """Scores of one video's pairs (keys shared by ``gts`` and ``res``)."""
        with contextlib.redirect_stdout(io.StringIO()):  # BLEU prints its lengths
            bleu, _ = self._bleu.compute_score(gts, res)
        out: dict[str, float | None] = {f"Bleu_{n}": float(b) for n, b in enumerate(bleu, 1)}
        out["METEOR"] = None
        if self._meteor is not None:
            try:
                out["METEOR"] = float(self._meteor.compute_score(gts, res)[0])
            except (ValueError, OSError, BrokenPipeError) as exc:
                self.warnings.append(f"METEOR failed ({type(exc).__name__}: {exc}); reported "
                                     "as null from here on")
                self.close()
        out["ROUGE_L"] = float(self._rouge.compute_score(gts, res)[0])
        # CIDEr weighs n-grams by how many references hold them; references with no token at
        # all (an empty or punctuation-only sentence) leave it nothing to weigh: it scores 0
        # (pycocoevalcap would raise ``max() arg is an empty sequence``)
        out["CIDEr"] = float(self._cider.compute_score(gts, res)[0]) \
            if any(r.split() for refs in gts.values() for r in refs) else 0.0
        return out

    def close(self) -> None:
        """Stop METEOR's JVM (pycocoevalcap only does it when the object is collected)."""
        m, self._meteor = self._meteor, None
        if m is not None:
            proc = m.meteor_p
            with contextlib.suppress(OSError):
                proc.stdin.close()
            proc.kill()
            proc.wait()


def tokenize_all(sentences: list[str], java: str | None) -> tuple[list[str], str, list[str]]:
    """Tokenised sentences, the tokenizer used, and warnings (PTB with Java, else Python)."""
    clean = [ascii_only(s) for s in sentences]
    warn = []
    if java is not None:
        try:
            return ptb_tokenize(clean, java), "ptb (Stanford CoreNLP 3.4.1, Java)", []
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            warn = [f"PTB tokenizer failed ({exc}); used the Python tokenizer instead"]
    return [python_tokenize(s) for s in clean], "python (PTB approximation)", warn

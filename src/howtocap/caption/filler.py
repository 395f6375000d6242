"""Captions that show nothing: spoken filler, talk to the viewer, patience remarks, sign-offs.

A small LLM captions "so yeah let's see" as readily as "now whisk the eggs"; such a caption
names nothing a frame could show, so it only teaches the retrieval model noise, and the align
filter cannot catch it when it is spoken over the task. The test reads spaCy's parse
(``en_core_web_sm``): a caption shows something when it has a content word a camera could film
(a non-talk, non-light verb, or a concrete noun outside talk to the viewer). The rules, their
reasons and examples are in docs/captions.md ("Fillers"); ``talk_reason`` adds ``schedule`` and
``story`` (issue #40). The reason only explains: the parse alone decides.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import queue
import re
import struct
import subprocess
import sys
import tempfile
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from howtocap.errors import HowtocapError, ServiceUnavailable

REASONS = ("filler", "meta", "time", "signoff", "no-action")
# Captions that name things but are talk, not a step (issue #40): see ``talk_reason``.
TALK_REASONS = ("story", "schedule")
# Bump when the rules change what they reject: it is part of the caption stage's fingerprint.
RULES_VERSION = 4
# What a parse is read for: a parsed caption (spaCy ``Doc``) -> its answer (a verdict, ...).
Judge = Callable[[Any], Any]


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Verbs about thinking, perceiving or talking to the viewer: no visible action of their own.
META_VERBS = _words(
    "see know think hope believe guess mean say tell talk show trust love like enjoy remember "
    "forget promise bet wonder care worry imagine feel thank welcome subscribe comment watch "
    "wish swear admit suppose figure realize notice understand learn want appreciate")
# Light verbs: they show something only together with a concrete noun.
LIGHT_VERBS = _words(
    "take give get go keep come do have make look check try start begin continue need use "
    "hang hold wait be let help finish move get find seem happen stop work")
# Nouns no camera films: time, people, abstractions, the channel's business.
TIME_NOUNS = _words("time minute second sec hour while moment day week year today tonight "
                       "morning night overnight patience rush hurry")
PERSON_NOUNS = _words("guy everyone everybody folk friend people kid child family mom mother "
                         "dad father sister brother wife husband boy girl man woman viewer "
                         "audience subscriber lady gentleman other others someone somebody "
                         "anyone anybody")
GREETINGS = _words("bye goodbye cheers hello hi hey welcome thanks")
ABSTRACT_NOUNS = _words(
    "bit lot part way thing stuff step process video channel comment question story idea "
    "point end one kind sort type trick tip secret reason problem mistake difference note "
    "everything something nothing anything job fun luck sense matter course sure rest place "
    "sale college trip recipe version favorite favourite description link bell button "
    "episode series today's")
NON_CONTENT_NOUNS = TIME_NOUNS | PERSON_NOUNS | ABSTRACT_NOUNS | GREETINGS
# Roots that evaluate instead of describing ("Perfect.", "Looks good.").
EVALUATIONS = _words("perfect nice good great easy done ready beautiful delicious awesome "
                        "cool lovely amazing simple fine right okay ok yes yeah sure wonderful "
                        "fantastic excellent gorgeous yummy tasty incredible")
SPEAKER_VIEWER = _words("i me my mine we us our ours you your yours y'all ya")

_SIGNOFF = re.compile(
    r"\b(?:bye|goodbye|see you|see ya|that(?:'?s| is) (?:pretty much |about )?(?:it|all)|"
    r"thanks?(?: you)?(?: so much)? for|happy (?:cooking|baking)|until next time|cheers|"
    r"take care)\b"
    r"|^(?:and )?(?:enjoy|done|we'?re done|all done)\W*$", re.IGNORECASE)
# A whole caption that is a farewell formula, whatever its parse ("Happy cooking.").
_FAREWELL = re.compile(r"^\W*(?:and |so )?(?:happy (?:cooking|baking|eating)|bon appetit|"
                       r"(?:good)?bye(?: for now)?|cheers|enjoy(?: your meal)?)\W*$",
                       re.IGNORECASE)
_FILLER = re.compile(
    r"\b(?:hang on|hold on|let'?s see|let me see|where (?:was|were) (?:i|we)|where'?s my|"
    r"keep going|here we go|there we go|moving on|let'?s get (?:started|going)|let'?s go|"
    r"one sec|um+|uh+|hmm+|oh boy|anyway)\b", re.IGNORECASE)
_TIME = re.compile(r"\b(?:take (?:your|my|our|some) time|wait|patien(?:t|ce)|a while|"
                   r"(?:a|one|few|couple|some)\b.{0,10}\b(?:minutes?|seconds?|hours?|moment))\b",
                   re.IGNORECASE)



def _nearest_verb(tok: Any) -> Any | None:
    """The closest ancestor that heads a clause (a verb, or a mis-tagged root)."""
    for anc in tok.ancestors:
        if anc.pos_ in ("VERB", "AUX") or anc.dep_ == "ROOT":
            return anc
    return None


def _talks_to_viewer(verb: Any) -> bool:
    """A talk/think verb whose clause has the speaker or viewer in it ("let me know")."""
    if verb.lemma_.lower() not in META_VERBS:
        return False
    near = [verb, *verb.children, *(verb.head.children if verb.dep_ != "ROOT" else ())]
    return any(t.lower_ in SPEAKER_VIEWER for t in near)


def _content_word(tok: Any) -> bool:
    """Whether a token names something a frame could show (see the module docstring)."""
    lemma = tok.lemma_.lower()
    if tok.pos_ == "VERB":
        return lemma not in META_VERBS and lemma not in LIGHT_VERBS
    root_like = tok.dep_ == "ROOT" or (tok.dep_ == "conj" and tok.head.dep_ == "ROOT")
    if tok.pos_ == "ADJ":  # a mis-tagged imperative ("Stir.") names the action
        return root_like and tok.i == tok.sent.start and lemma not in EVALUATIONS
    if tok.pos_ not in ("NOUN", "PROPN") or lemma in NON_CONTENT_NOUNS \
            or tok.lower_ in NON_CONTENT_NOUNS or lemma in EVALUATIONS:
        return False
    if lemma in META_VERBS | LIGHT_VERBS and root_like and tok.i == tok.sent.start:
        return False  # "Look." / "Wait." tagged as a noun
    verb = _nearest_verb(tok)
    while verb is not None:  # blocked by talk between speaker and viewer anywhere above
        if _talks_to_viewer(verb):
            return False
        verb = _nearest_verb(verb)
    return True


def shows_something(doc: Any) -> bool:
    """True when the parsed caption names a visible action or object."""
    return not _FAREWELL.match(doc.text) and any(_content_word(t) for t in doc)


def reason(doc: Any) -> str:
    """Why a caption that shows nothing is rejected: one of ``REASONS``."""
    text = doc.text
    if _SIGNOFF.search(text):
        return "signoff"
    if _FILLER.search(text):
        return "filler"
    if _TIME.search(text) or any(t.lemma_.lower() in TIME_NOUNS for t in doc):
        return "time"
    if any(_talks_to_viewer(t) for t in doc) or any(
            t.lower_ in ("you", "your") for t in doc):
        return "meta"
    content = [t for t in doc if t.pos_ in ("NOUN", "PROPN", "VERB")
               and t.lemma_.lower() not in LIGHT_VERBS]
    return "no-action" if content else "filler"


# A channel's upload schedule ("New videos every Monday, Wednesday and Friday.").
_SCHEDULE = re.compile(
    r"\b(?:new (?:videos?|recipes?|episodes?)\b|(?:videos?|episodes?|uploads?) (?:every|each)\b|"
    r"every (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|week)\b|"
    r"(?:on|every) (?:mondays|tuesdays|wednesdays|thursdays|fridays|saturdays|sundays)\b)",
    re.IGNORECASE)
# Verbs whose statement tells about the food or the cook instead of doing something to it
# ("It tastes good.", "This dish is named after Singapore.", "I have no idea why …").
STORY_VERBS = _words("be have taste smell look sound seem feel know think name call mean "
                     "originate come grow love like enjoy remember learn live visit buy find "
                     "eat hope believe wonder grow use")
SUBJECT_DEPS = ("nsubj", "nsubjpass", "expl", "csubj")


def talk_reason(doc: Any) -> str:
    """"story" for a caption that names things but is talk, else "" (``schedule``, the
    channel's upload days, is found first by ``verdict``): a question, or a statement with
    its own subject (a written step has none) whose main verb is a state, taste, origin or
    opinion verb (``STORY_VERBS``)."""
    if doc.text.rstrip().endswith("?"):
        return "story"
    root = next((t for t in doc if t.dep_ == "ROOT"), None)  # the first sentence's
    story = root is not None and root.lemma_.lower() in STORY_VERBS and any(
        c.dep_ in SUBJECT_DEPS for c in root.children)
    return "story" if story else ""


def verdict(doc: Any) -> str:
    """"" when the caption shows something and is no story or schedule, else the reason for
    rejecting it."""
    if _SCHEDULE.search(doc.text):  # names things (videos, days) but shows none of them
        return "schedule"
    return talk_reason(doc) if shows_something(doc) else reason(doc)


def load_parser(name: str | None = None) -> Any:
    """The project's spaCy English pipeline with its dependency parser (loaded once)."""
    from howtocap.nlp import load_spacy

    return load_spacy(name, parser=True)


@dataclass(slots=True)
class _Request:
    nlp: Any
    judge: Judge
    texts: Sequence[str]
    answers: list[Any] | None = None
    error: BaseException | None = None


class _Combiner:
    """Requests from many threads parsed as one ``nlp.pipe`` call: the thread that gets the
    pipeline takes every request waiting for it. A caption run over HTTP has dozens of videos
    in flight, each with a few dozen captions; spaCy is far cheaper per text in big batches,
    and the parse of every caption is the driver's largest own cost."""

    def __init__(self) -> None:
        self._run = threading.Lock()  # one pipeline per process: one parse at a time
        self._queue = threading.Lock()
        self._waiting: list[_Request] = []

    def __call__(self, nlp: Any, texts: Sequence[str], batch_size: int,
                 judge: Judge | None = None) -> list[Any]:
        """``judge`` (default: ``verdict``) of each text's parse."""
        me = _Request(nlp, judge or verdict, texts)
        with self._queue:
            self._waiting.append(me)
        with self._run:
            if me.answers is None and me.error is None:  # nobody took it: take all waiting
                with self._queue:
                    batch, self._waiting = self._waiting, []
                for same, how in {(id(r.nlp), r.judge): (r.nlp, r.judge)
                                  for r in batch}.values():
                    group = [r for r in batch if r.nlp is same and r.judge is how]
                    try:
                        docs = same.pipe([t for r in group for t in r.texts],
                                         batch_size=batch_size)
                        found = [how(doc) for doc in docs]
                    except BaseException as exc:  # every caller of the batch sees it
                        for r in group:
                            r.error = exc
                        continue
                    at = 0
                    for r in group:
                        r.answers, at = found[at:at + len(r.texts)], at + len(r.texts)
        if me.error is not None:
            raise me.error
        assert me.answers is not None
        return me.answers


_COMBINE = _Combiner()


class _Verdicts:
    """Answers already found, per parser object, for at most ``size`` (kind, text) pairs each
    (first in, first out): short captions repeat across videos ("Stir.", "Serve."), and an
    answer depends on the text, the parser and the kind alone."""

    def __init__(self, size: int = 100_000) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._by_nlp: weakref.WeakKeyDictionary[Any, OrderedDict[tuple[str, str], Any]] = \
            weakref.WeakKeyDictionary()

    def known(self, nlp: Any, texts: Iterable[str], kind: str = "verdict"
              ) -> dict[str, Any] | None:
        """The answers this parser already gave for some of ``texts`` (None: the parser
        cannot be weakly referenced, so nothing is kept for it)."""
        with self._lock:
            try:
                table = self._by_nlp.setdefault(nlp, OrderedDict())
            except TypeError:
                return None
            return {t: table[kind, t] for t in texts if (kind, t) in table}

    def add(self, nlp: Any, found: dict[str, Any], kind: str = "verdict") -> None:
        with self._lock:
            table = self._by_nlp.setdefault(nlp, OrderedDict())
            for text, answer in found.items():
                if (kind, text) not in table and len(table) >= self.size:
                    table.popitem(last=False)  # first in, first out
                table[kind, text] = answer


_VERDICTS = _Verdicts()


def default_parse_workers(remote_llm: bool) -> int:
    """Parser processes when none are asked for: one per core, up to 8 (the driver's own work
    is small: benchmarks/results/parse.md, driver.md); none with an LLM in this process, which
    already takes every core."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 2)  # the cores this process may use (a SLURM or cgroup share)
    return max(1, min(8, cores)) if remote_llm else 0


class ParserPool:
    """The filler test's parse in ``workers`` processes (passed as ``nlp``): in the driver's
    process it would hold the GIL the HTTP client and the commits need, on one core. Each
    request goes to an idle worker (``caption.parse_worker``: the same pipeline and rules).

    Plain ``python -m`` children speaking length-prefixed JSON, not ``multiprocessing`` ones:
    a spawned child re-runs the caller's main script, so a script without a ``__main__``
    guard would caption again inside every worker."""

    def __init__(self, workers: int, name: str | None = None) -> None:
        if workers < 1:
            raise ValueError("a parser pool needs at least one worker")
        self.workers, self.name = workers, name
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._all: list[_Worker] = []
        # the caller's import path (a checkout put first, a notebook's additions) goes along
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        for _ in range(workers):
            log = tempfile.TemporaryFile()  # noqa: SIM115 - the worker's stderr, kept open
            proc = subprocess.Popen([sys.executable, "-m", "howtocap.caption.parse_worker",
                                     name or ""], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=log, env=env)
            self._all.append(_Worker(proc, log))
        weakref.finalize(self, _stop_all, list(self._all))
        for w in self._all:  # each loads its parser: a missing model is one error, up front
            w.recv()
            self._idle.put(w)

    def verdicts(self, texts: Sequence[str], batch_size: int = 256,
                 kind: str = "verdict") -> list[Any]:
        """The filler verdicts, or another ``kind`` of answer (``caption.imperative.JUDGES``:
        the imperative rewrites, or verdict and rewrite from one parse), parsed by an idle
        worker."""
        if not texts:
            return []
        worker = self._idle.get()
        try:
            return worker.ask(list(texts), batch_size, kind)
        finally:
            self._idle.put(worker)

    def close(self) -> None:
        _stop_all(self._all)


class _Worker:
    """One parser process and its pipes; used by one thread at a time (``ParserPool``)."""

    def __init__(self, proc: Any, log: Any) -> None:
        self.proc, self.log = proc, log

    def recv(self) -> Any:
        reply = read_message(self.proc.stdout)
        if reply is None:
            raise self._died()
        if isinstance(reply, dict) and "error" in reply:
            raise HowtocapError(str(reply["error"]))
        return reply

    def _died(self) -> Exception:
        """Every video needs the parse: the run stops, marking nothing failed (exit 75)."""
        code = self.proc.wait()
        self.log.seek(0)
        tail = self.log.read()[-600:].decode(errors="replace").strip().splitlines()
        return ServiceUnavailable(f"the filler test's parser process exited (code {code})"
                                  + (f": {tail[-1]}" if tail else ""))

    def ask(self, texts: list[str], batch_size: int, kind: str) -> list[Any]:
        try:
            send_message(self.proc.stdin, {"texts": texts, "batch_size": batch_size,
                                           "kind": kind})
        except OSError:  # a broken pipe: the worker is gone
            raise self._died() from None
        # a pair of answers comes back as a JSON list: the tuple the parse in process gives
        return [tuple(v) if isinstance(v, list) else v for v in self.recv()]


def send_message(out: Any, obj: object) -> None:
    """One message of the pool's pipes: JSON after its length (4 bytes, big-endian)."""
    data = json.dumps(obj).encode()
    out.write(struct.pack(">I", len(data)) + data)
    out.flush()


def read_message(inp: Any) -> Any | None:
    """The next message ``send_message`` wrote, or None at end of input."""
    head = inp.read(4)
    if len(head) < 4:
        return None
    return json.loads(inp.read(struct.unpack(">I", head)[0]))


def _stop_all(workers: list[_Worker]) -> None:
    """Close the pipes (a worker exits at end of input); kill what does not exit."""
    for w in workers:
        with contextlib.suppress(OSError):
            w.proc.stdin.close()
    for w in workers:
        try:
            w.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 - a worker that hangs is killed, whatever the reason
            w.proc.kill()
            w.proc.wait()
        w.log.close()


def parsed(texts: Iterable[str], nlp: Any, kind: str, judge: Judge, *,
           batch_size: int = 256) -> list[Any]:
    """``judge`` of each text's parse (``kind`` names it for a ``ParserPool``'s workers): texts
    this parser saw are answered from a bounded table, the others parsed once each, by the
    pool or in one ``nlp.pipe`` pass shared with other threads' waiting captions."""
    items: Sequence[str] = [str(t) for t in texts]
    if not items:
        return []
    unique = list(dict.fromkeys(items))
    known = _VERDICTS.known(nlp, unique, kind)
    parse = functools.partial(nlp.verdicts, kind=kind) if isinstance(nlp, ParserPool) \
        else functools.partial(_COMBINE, nlp, judge=judge)
    if known is None:
        return parse(items, batch_size)
    new = [t for t in unique if t not in known]
    if new:
        found = dict(zip(new, parse(new, batch_size), strict=True))
        _VERDICTS.add(nlp, found, kind)
        known.update(found)
    return [known[t] for t in items]


def reject_reasons(texts: Iterable[str], nlp: Any | None = None, *,
                   batch_size: int = 256) -> list[str]:
    """One verdict per caption ("" = kept), parsed once each (``parsed``)."""
    return parsed(texts, nlp or load_parser(), "verdict", verdict, batch_size=batch_size)

"""The stage graph, derived from what each stage declares it reads and writes.

Stage B is downstream of stage A when B reads something A writes: a table, a cache outside the
tables (``reads_cache`` / ``writes_cache``) or a table A's reduce step writes
(``reduce_writes``). ``--redo`` of A clears A and every stage downstream of it; ``howtocap
status`` counts a stage's pending videos from the stage whose table it reads. The caller gives
the stages, or ``discover`` finds every step's (``howtocap/<step>/stage.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Node:
    name: str
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    reads_cache: tuple[str, ...] = ()
    writes_cache: tuple[str, ...] = ()
    reduce_writes: tuple[str, ...] = ()

    @classmethod
    def of(cls, stage: Any) -> Node:
        return cls(stage.name, *(tuple(getattr(stage, f, ()) or ()) for f in
                                 ("reads", "writes", "reads_cache", "writes_cache",
                                  "reduce_writes")))

    @property
    def makes(self) -> set[str]:
        return {*self.writes, *self.reduce_writes, *(f"cache:{c}" for c in self.writes_cache)}

    @property
    def needs(self) -> set[str]:
        return {*self.reads, *(f"cache:{c}" for c in self.reads_cache)}


class StageGraph:
    """Stages in the given order (the first declaration of a name wins) and the edges their
    declarations imply."""

    def __init__(self, stages: Iterable[Any]) -> None:
        self.nodes: dict[str, Node] = {}
        for st in stages:
            node = Node.of(st)
            self.nodes.setdefault(node.name, node)

    @property
    def names(self) -> list[str]:
        return list(self.nodes)

    def with_stages(self, stages: Iterable[Any]) -> StageGraph:
        """This graph plus stages it does not know yet (a stage being prepared)."""
        return StageGraph([*self.nodes.values(), *stages])

    def children(self, name: str) -> list[str]:
        made = self.nodes[name].makes if name in self.nodes else set()
        return sorted(n for n, node in self.nodes.items() if n != name and made & node.needs)

    def downstream(self, name: str) -> tuple[str, ...]:
        """Every stage computed, directly or not, from ``name``'s results, upstream first
        (ties by name)."""
        left: set[str] = set()
        todo = [name]
        while todo:
            todo += [c for c in self.children(todo.pop()) if c != name and c not in left]
            left.update(todo)
        order: list[str] = []
        while left:  # Kahn's order within the reachable stages (a cycle: by name)
            ready = [n for n in left if not any(n in self.children(m) for m in left - {n})]
            order.append(min(ready or left))
            left.discard(order[-1])
        return tuple(order)

    def tables(self, name: str) -> tuple[str, ...]:
        """The tables ``name``'s results live in (parts and merged), cleared with it."""
        node = self.nodes.get(name)
        return (*node.writes, *node.reduce_writes) if node else ()

    def feeder(self, name: str) -> str | None:
        """The stage that writes the first table ``name`` reads (its videos come from there)."""
        node = self.nodes.get(name)
        if node is None or not node.reads:
            return None
        return next((n for n, other in self.nodes.items()
                     if n != name and node.reads[0] in other.writes), None)

    def is_source(self, name: str) -> bool:
        """Reads no table: every input video reaches it."""
        return name in self.nodes and not self.nodes[name].reads


@cache
def discover() -> StageGraph:
    """Every step's stages, found by convention (``howtocap/<step>/stage.py``)."""
    from howtocap.engine.stage import BaseStage

    root = Path(__file__).resolve().parents[1]
    found: list[type] = []
    for pkg in sorted(p.parent.name for p in root.glob("*/stage.py")):
        module = importlib.import_module(f"howtocap.{pkg}.stage")
        found += [c for c in vars(module).values()
                  if isinstance(c, type) and issubclass(c, BaseStage)
                  and c.__module__ == module.__name__ and c.name]
    return StageGraph(found)

"""Gather pipelines: named producers whose outputs feed one consumer.

    result = (
        planner.cmd(["python3", "plan.py"]).as_("code")
        + searcher.cmd(["python3", "search.py"]).as_("data")
        | executor.cmd(["python3", "consume.py"])
    ).run()

Each stage runs under its own sandbox's policy; only the bytes cross. The consumer
reads the last producer's output on its stdin and the others' on fds 3, 4, …;
``SANDTRAP_GATHER`` (``"code:3,data:0"``) names them, and :data:`sandtrap.inputs`
reads them by name (docs/protocol.md, "pipeline", gather).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ._errors import InvalidRequest, Problem

if TYPE_CHECKING:
    from ._result import Result
    from ._sandbox import Command, Pipeline, _Call


class NamedCommand:
    """A command whose output a gather's consumer reads by ``name``
    (``sb.cmd(argv).as_(name)``); combine them with ``+``."""

    __slots__ = ("command", "name")

    def __init__(self, command: Command, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"as_(): want a non-empty name, got {name!r}")
        self.command: Command = command
        self.name: str = name

    def __add__(self, other: NamedCommand | Gather) -> Gather:
        return Gather([self]) + other

    def __repr__(self) -> str:
        return f"<sandtrap.NamedCommand {self.name!r} {self.command.argv!r}>"


class Gather:
    """Named commands run at once, gathered into a consumer with ``|``."""

    __slots__ = ("sources",)

    def __init__(self, sources: list[NamedCommand]) -> None:
        self.sources: list[NamedCommand] = list(sources)

    def __add__(self, other: NamedCommand | Gather) -> Gather:
        if isinstance(other, NamedCommand):
            return Gather([*self.sources, other])
        if isinstance(other, Gather):
            return Gather([*self.sources, *other.sources])
        return NotImplemented

    def __or__(self, other: Command | Pipeline) -> GatherPipeline:
        from ._sandbox import Command, Pipeline

        if isinstance(other, Command):
            return GatherPipeline(self, Pipeline(other))
        if isinstance(other, Pipeline):
            return GatherPipeline(self, other)
        return NotImplemented

    def __repr__(self) -> str:
        return "<sandtrap.Gather " + " + ".join(repr(s.name) for s in self.sources) + ">"


class GatherPipeline:
    """A gather and the stages it feeds: ``.run()`` returns the last stage's
    :class:`Result` with every stage's (producers first) in ``stages``."""

    __slots__ = ("gather", "pipeline")

    def __init__(self, gather: Gather, pipeline: Pipeline) -> None:
        self.gather: Gather = gather
        self.pipeline: Pipeline = pipeline

    def __or__(self, other: Command | Pipeline) -> GatherPipeline:
        return GatherPipeline(self.gather, self.pipeline | other)

    def _request(self, timeout: Any, stdout: Any) -> tuple[_Call, bytes]:
        probs: list[Problem] = []
        if len(self.gather.sources) < 2:
            probs.append(Problem("gather", "a gather needs at least two named commands (a.as_('x') + b.as_('y'))"))
        gather = []
        for i, n in enumerate(self.gather.sources):
            st = n.command._stage(probs, i, at=f"gather[{i}].")
            st["name"] = n.name
            gather.append(st)
        extra_sb = [n.command.sandbox for n in self.gather.sources]
        return self.pipeline._request(None, timeout, stdout=stdout, gather=gather, more=extra_sb, probs=probs)

    def run(self, timeout: float | None = None, stdout: Any = None) -> Result:
        """Run every producer and the consumer at once. ``stdout``: a file
        descriptor (or a file) that gets the last stage's output instead of the
        result."""
        from ._sandbox import _wait_sync

        return _wait_sync(*self._request(timeout, stdout))

    async def arun(self, timeout: float | None = None, stdout: Any = None) -> Result:
        """``run`` for asyncio."""
        from ._sandbox import _wait_async

        return await _wait_async(*self._request(timeout, stdout))

    def __repr__(self) -> str:
        return f"<sandtrap.GatherPipeline {self.gather!r} | {self.pipeline!r}>"


class _Inputs:
    """A gather consumer's inputs by name (read once, then cached): ``inputs["code"]``."""

    def __init__(self) -> None:
        self._cache: dict[str, str] = {}

    def _map(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for pair in filter(None, os.environ.get("SANDTRAP_GATHER", "").split(",")):
            name, _, fd = pair.rpartition(":")
            out[name] = int(fd)
        return out

    def __getitem__(self, name: str) -> str:
        if name not in self._cache:
            fds = self._map()
            if name not in fds:
                raise KeyError(f"no gather input named {name!r} (there are: {', '.join(fds) or 'none'})")
            with os.fdopen(fds[name], "r", closefd=True) as f:
                self._cache[name] = f.read()
        return self._cache[name]

    def __contains__(self, name: object) -> bool:
        return name in self._map()

    def __iter__(self) -> Iterator[str]:
        return iter(self._map())

    def keys(self) -> list[str]:
        return list(self._map())


inputs = _Inputs()

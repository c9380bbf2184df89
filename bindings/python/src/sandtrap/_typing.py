"""Types of the public API that the standard library does not have."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol, TypeVar, overload

__all__ = ["ArgSequence"]

_T_co = TypeVar("_T_co", covariant=True)


class ArgSequence(Protocol[_T_co]):
    """A sequence of arguments that is not itself a string: ``["ls", "-l"]`` or a
    tuple, never ``"ls"``. A ``str`` is a ``Sequence[str]``, so ``Sequence`` would let
    ``run("ls")`` through; ``str.__contains__`` accepts only a ``str`` where a sequence
    accepts any object, which is how this protocol refuses it (and ``bytes``) in a
    type checker. At run time a string is refused by the argv check all the same."""

    @overload
    def __getitem__(self, index: int, /) -> _T_co: ...
    @overload
    def __getitem__(self, index: slice, /) -> Sequence[_T_co]: ...
    def __contains__(self, value: object, /) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[_T_co]: ...
    def index(self, value: Any, start: int = 0, stop: int = ..., /) -> int: ...
    def count(self, value: Any, /) -> int: ...
    def __reversed__(self) -> Iterator[_T_co]: ...

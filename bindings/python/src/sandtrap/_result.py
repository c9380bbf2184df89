"""The outcome of a run."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from ._errors import ProcessFailed
from ._view import Change, changes_of


class ExitReason(str, enum.Enum):
    """Why a run ended (``Result.reason``): the engine's one definition
    (core/run/popen.go), the same in every binding. ``SIGNALED`` comes with
    ``Result.signal``; the limit and start-failure reasons are also ``error.kind``."""

    EXITED = "exited"
    SIGNALED = "signaled"
    KILLED = "killed"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    MEMORY_LIMIT = "memory_limit"
    CPU_LIMIT = "cpu_time_limit"
    NOT_FOUND = "not_found"
    SPAWN_FAILED = "spawn_failed"
    ISOLATION_UNAVAILABLE = "isolation_unavailable"
    STAGE_FAILED = "stage_failed"
    DISK_LIMIT = "disk_limit"
    COMMIT_FAILED = "commit_failed"
    CLOSED = "closed"
    INTERNAL = "internal"
    UNKNOWN = "unknown"

    @classmethod
    def parse(cls, v: Any) -> ExitReason:
        try:
            return cls(str(v))
        except ValueError:
            return cls.UNKNOWN

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ErrorInfo:
    """Why the engine stopped or could not start a run.

    ``kind`` is a stable name: ``not_found``, ``spawn_failed``, ``timeout``,
    ``cancelled``, ``cpu_time_limit``, ``memory_limit``… (docs/protocol.md).
    ``str(error)`` is the message.
    """

    kind: str
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Denial:
    """One access the sandbox refused a run, counted (docs/protocol.md "denials").

    ``path`` names the file of a call about files, ``address`` the destination of a
    call about sockets, ``reason`` why the supervisor could not decide (and so
    refused); the others are ``None``. ``errno`` is the name (``"EACCES"``),
    ``errno_nr`` the number. ``source`` is ``"supervisor"``, ``"landlock"`` or
    ``"seccomp"``: ``Result.denials_sources`` says which of them are reported.
    """

    syscall: str
    errno: str
    errno_nr: int
    count: int
    source: str
    path: str | None = None
    address: str | None = None
    reason: str | None = None

    @classmethod
    def from_response(cls, m: dict[str, Any]) -> Denial:
        def opt(k: str) -> str | None:
            v = m.get(k)
            return str(v) if v else None

        return cls(
            syscall=str(m.get("syscall") or ""),
            errno=str(m.get("errno") or ""),
            errno_nr=int(m.get("errno_nr") or 0),
            count=int(m.get("count") or 0),
            source=str(m.get("source") or ""),
            path=opt("path"),
            address=opt("address"),
            reason=opt("reason"),
        )


@dataclass
class Result:
    """What a run did.

    ``stdout`` and ``stderr`` are bytes: a sandboxed program's output need not be
    valid UTF-8. ``success`` is true when the program exited 0 and nothing went
    wrong. A pipeline's result is its last stage's, with every stage in ``stages``;
    it succeeds only if every stage did, and ``failed_stage`` is the index of the
    first that failed (its error is named in ``error``).

    ``denials`` lists what the run was refused (at most 256 entries; the denials
    beyond are counted in ``denials_dropped``), and ``denials_sources`` says for
    each source (``supervisor``, ``landlock``, ``seccomp``) ``"reported"`` or why
    its denials are not in the list.

    With a ``workdir``: ``changes`` lists every path the run changed under it,
    ``branch`` what became of them (``"committed"``, ``"aborted"`` or ``"kept"``:
    then :meth:`Sandbox.commit` / :meth:`Sandbox.abort` take the result),
    ``committed`` what a commit applied and ``commit_refused`` what it refused.
    """

    success: bool
    exit_code: int | None = None
    signal: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    error: ErrorInfo | None = None
    timed_out: bool = False
    cancelled: bool = False
    isolation: dict[str, Any] = field(default_factory=dict, repr=False)
    usage: dict[str, Any] = field(default_factory=dict, repr=False)
    stages: list[Result] = field(default_factory=list, repr=False)
    failed_stage: int | None = None
    denials: list[Denial] = field(default_factory=list)
    denials_dropped: int = 0
    denials_sources: dict[str, str] = field(default_factory=dict, repr=False)
    changes: list[Change] = field(default_factory=list)
    branch: str | None = None
    branch_id: int | None = field(default=None, repr=False)
    committed: list[Change] = field(default_factory=list, repr=False)
    commit_refused: list[Change] = field(default_factory=list, repr=False)
    reason: ExitReason = ExitReason.UNKNOWN

    @property
    def returncode(self) -> int | None:
        """``subprocess``'s convention: the exit code, or minus the signal that
        ended it (sandtrap's own kills read as ``-9``)."""
        if self.exit_code is not None:
            return self.exit_code
        if self.signal is not None:
            return -self.signal
        return None

    def check(self) -> Result:
        """Return this result if the run succeeded; else raise
        :class:`ProcessFailed` naming why (its ``result`` is this one)."""
        if self.success:
            return self
        why = {
            ExitReason.EXITED: f"exited with status {self.exit_code}",
            ExitReason.SIGNALED: f"was killed by signal {self.signal}",
        }.get(self.reason)
        if why is None:
            why = str(self.error) if self.error else f"ended: {self.reason}"
        tail = self.stderr[-400:].decode("utf-8", "replace").strip() if self.stderr else ""
        msg = f"the run {why}" + (f"; its stderr ends with: {tail}" if tail else "")
        err = ProcessFailed(msg)
        err.result = self
        raise err

    @classmethod
    def from_response(cls, m: dict[str, Any]) -> Result:
        """Build a result from the engine's response map."""
        err = m.get("error")
        info = None
        if isinstance(err, dict):
            info = ErrorInfo(str(err.get("kind") or "internal"), str(err.get("message") or ""))
        return cls(
            success=bool(m.get("success")),
            exit_code=m.get("exit_code"),
            signal=m.get("signal"),
            stdout=_bytes(m.get("stdout")),
            stderr=_bytes(m.get("stderr")),
            stdout_truncated=bool(m.get("stdout_truncated")),
            stderr_truncated=bool(m.get("stderr_truncated")),
            error=info,
            timed_out=bool(m.get("timed_out")),
            cancelled=bool(m.get("cancelled")),
            isolation=m.get("isolation") or {},
            usage=m.get("usage") or {},
            stages=[cls.from_response(s) for s in (m.get("stages") or []) if isinstance(s, dict)],
            failed_stage=m.get("failed_stage") if isinstance(m.get("failed_stage"), int) else None,
            denials=[Denial.from_response(d) for d in (m.get("denials") or []) if isinstance(d, dict)],
            denials_dropped=int(m.get("denials_dropped") or 0),
            denials_sources={str(k): str(v) for k, v in (m.get("denials_sources") or {}).items()},
            changes=changes_of(m.get("changes")),
            branch=str(m["branch"]) if m.get("branch") else None,
            branch_id=int(m["branch_id"]) if m.get("branch_id") else None,
            committed=changes_of(m.get("committed")),
            commit_refused=changes_of(m.get("commit_refused")),
            reason=ExitReason.parse(m.get("reason")),
        )


def _bytes(v: Any) -> bytes:
    if v is None:
        return b""
    if isinstance(v, str):
        return v.encode("utf-8", "surrogateescape")
    return bytes(v)


@dataclass
class LearnResult:
    """What :meth:`Sandbox.learn` found.

    ``policy`` is the smallest policy the command needed (``fs_readable``,
    ``fs_writable``, ``net_allow``), as keyword arguments for ``Sandbox(**policy)``;
    ``profile`` is the same as TOML text in the profile format. ``observed`` lists
    every access recorded (``read``, ``write``, ``exec``, ``create``, ``connect``),
    paths as the program named them; ``dropped`` counts paths beyond the record's
    cap. ``result`` is the learning run's own :class:`Result`; ``mode`` says what
    that run was allowed.
    """

    result: Result
    policy: dict[str, Any]
    profile: str
    observed: dict[str, list[str]] = field(default_factory=dict, repr=False)
    dropped: int = 0
    mode: str = ""

    @classmethod
    def from_response(cls, m: dict[str, Any], keywords: dict[str, str] | None = None) -> LearnResult:
        kw = keywords or {}
        pol = m.get("policy") or {}
        return cls(
            result=Result.from_response(m.get("result") or {}),
            policy={kw.get(str(k), str(k)): list(v) for k, v in pol.items()},
            profile=str(m.get("profile") or ""),
            observed={str(k): [str(x) for x in (v or [])] for k, v in (m.get("observed") or {}).items()},
            dropped=int(m.get("dropped") or 0),
            mode=str(m.get("mode") or ""),
        )

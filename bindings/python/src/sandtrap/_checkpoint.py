"""Application checkpoints (``Sandbox.checkpoint``/``restore``; docs/protocol.md,
"checkpoints"). The names follow sandlock's: ``sb.checkpoint(save_fn=)`` returns a
:class:`Checkpoint`, ``cp.save(name, store=)`` persists it, ``Checkpoint.load(name,
store=, restore_fn=)`` reads one back (``restore_fn`` gets its ``app_state``),
``Checkpoint.list``/``delete``. What differs, stated plainly: sandtrap keeps no
process image (no ptrace, no CRIU). A checkpoint is the program's own state — the
bytes ``save_fn`` returns — beside its argv, cwd and env and the inventory of what
was not captured (``not_captured``: every process image, every open socket, pipe and
file); ``sb.restore(cp)`` starts the program again, in a sandbox of the same policy
only, with that state on fd 3 (``SANDTRAP_CHECKPOINT_FD``, ``SANDTRAP_CHECKPOINT_SIZE``)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_STORE = Path(os.path.expanduser("~")) / ".sandtrap" / "checkpoints"


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or "/" in name or name.startswith(".") or "\0" in name:
        raise ValueError(f"invalid checkpoint name {name!r}: a simple name, no path separators, not starting with '.'")


class Checkpoint:
    """One application checkpoint: a directory (``path``) holding ``checkpoint.json``
    and, with a ``save_fn``, ``app_state.bin``. ``name``, ``app_state`` (bytes or
    None), ``argv``, ``created``, ``not_captured`` (a list of ``{"what", "detail"}``:
    what a restore does not bring back) and ``meta`` (checkpoint.json, whole)."""

    def __init__(self, path: Path, meta: dict[str, Any], app_state: bytes | None, staged: bool = False) -> None:
        self.path: Path = path
        self.meta: dict[str, Any] = meta
        self.app_state: bytes | None = app_state
        self._staged = staged  # in a private temporary directory until save()

    @property
    def name(self) -> str:
        return str(self.meta.get("name") or "")

    @property
    def argv(self) -> list[str]:
        return list(self.meta["process"]["argv"])

    @property
    def created(self) -> str:
        return str(self.meta.get("created") or "")

    @property
    def not_captured(self) -> list[dict[str, str]]:
        return list(self.meta.get("not_captured") or [])

    def __repr__(self) -> str:
        return f"<sandtrap.Checkpoint {self.name or '(unsaved)'} {self.argv!r} at {self.path}>"

    def save(self, name: str, *, store: Path | str | None = None) -> Path:
        """Persist under ``store/name`` (default store ``~/.sandtrap/checkpoints``);
        never over an existing checkpoint (``FileExistsError``). Returns the path."""
        _check_name(name)
        root = Path(store) if store is not None else DEFAULT_STORE
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        dest = root / name
        if dest.exists():
            raise FileExistsError(f"a checkpoint {name!r} exists in {root}")
        meta = json.loads((self.path / "checkpoint.json").read_text())
        meta["name"] = name
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=root))
        try:
            for f in os.listdir(self.path):
                if f != "checkpoint.json":
                    shutil.copyfile(self.path / f, tmp / f)
            (tmp / "checkpoint.json").write_text(json.dumps(meta, indent=2) + "\n")
            os.rename(tmp, dest)  # (a race with another save of the same name: one wins, both whole)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if self._staged:
            shutil.rmtree(self.path.parent, ignore_errors=True)
            self._staged = False
        self.path, self.meta = dest, meta
        return dest

    @classmethod
    def load(
        cls, name: str, *, store: Path | str | None = None, restore_fn: Callable[[bytes], Any] | None = None
    ) -> Checkpoint:
        """Read ``store/name``; ``restore_fn`` (if given) is called with its
        ``app_state`` when it has one. The engine checks it again (format, digest,
        policy) when it is restored."""
        _check_name(name)
        root = Path(store) if store is not None else DEFAULT_STORE
        return cls.open(root / name, restore_fn=restore_fn)

    @classmethod
    def open(cls, path: Path | str, *, restore_fn: Callable[[bytes], Any] | None = None) -> Checkpoint:
        """A checkpoint directory by its path (``Checkpoint.load`` by name)."""
        p = Path(path)
        try:
            meta = json.loads((p / "checkpoint.json").read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"no checkpoint in {p}") from None
        st = None
        if meta.get("app_state"):
            st = (p / "app_state.bin").read_bytes()
        if restore_fn is not None and st is not None:
            restore_fn(st)
        return cls(p, meta, st)

    @classmethod
    def list(cls, *, store: Path | str | None = None) -> list[str]:
        """The names of the checkpoints in ``store``."""
        root = Path(store) if store is not None else DEFAULT_STORE
        if not root.is_dir():
            return []
        return sorted(
            d.name for d in root.iterdir() if not d.name.startswith(".") and (d / "checkpoint.json").is_file()
        )

    @classmethod
    def delete(cls, name: str, *, store: Path | str | None = None) -> None:
        """Remove ``store/name``."""
        _check_name(name)
        root = Path(store) if store is not None else DEFAULT_STORE
        d = root / name
        if not (d / "checkpoint.json").is_file():
            raise FileNotFoundError(f"no checkpoint {name!r} in {root}")
        shutil.rmtree(d)

    def __del__(self) -> None:
        if getattr(self, "_staged", False):
            shutil.rmtree(self.path.parent, ignore_errors=True)


def staging_dir() -> Path:
    """A private directory for a checkpoint not yet saved (the engine writes it)."""
    return Path(tempfile.mkdtemp(prefix="sandtrap-checkpoint-")) / "cp"

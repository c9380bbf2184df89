"""Profiles: TOML policies in the seed API's sections (docs/cli.md, "Profiles").

The engine reads and checks them (core/profile, through ``sandtrap_profile``): this
module only converts. ``load_profile`` returns the profile as sections of keys, the
shape of the file; ``policy_from_dict`` turns a dict of that shape into keyword
arguments of :class:`sandtrap.Sandbox`, checked as a profile file is (unknown
sections and keys, keys in the wrong section, wrong types, unsupported fields:
every problem at once, in a :class:`sandtrap.PolicyError`)::

    from sandtrap import Sandbox, load_profile, policy_from_dict
    sb = Sandbox(**policy_from_dict(load_profile("python")))
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from ctypes import byref, c_size_t, c_void_p
from typing import Any

from . import _native
from ._errors import Problem
from ._fields import KEYWORDS


def _call(req: dict[str, Any]) -> dict[str, Any]:
    body = _native.pack(req)
    out, n = c_void_p(), c_size_t()
    rc = _native.lib().sandtrap_profile(body, len(body), byref(out), byref(n))
    resp = _native.take_buffer(out, n) or {}
    if rc != _native.OK:
        err = _native.status_error(rc, resp)
        e = resp.get("error") if isinstance(resp.get("error"), dict) else {}
        probs = e.get("problems") if isinstance(e, dict) else None
        if isinstance(probs, list) and probs:
            # a profile's problems: where each one is (file:line: key) as the field
            err.problems = [_problem(p) for p in probs]
        raise err
    return resp


def _problem(p: Any) -> Problem:
    if not isinstance(p, dict):
        return Problem("", str(p))
    where = str(p.get("file") or "")
    if p.get("line"):
        where += f":{p['line']}"
    if p.get("key"):
        where += f": {p['key']}" if where else str(p["key"])
    prob = Problem(where, str(p.get("message") or ""))
    prob.file, prob.line, prob.key = p.get("file") or "", int(p.get("line") or 0), p.get("key") or ""  # type: ignore[attr-defined]
    return prob


def load_profile(name_or_path: str | os.PathLike[str]) -> dict[str, Any]:
    """The profile ``name_or_path`` as sections of keys: a saved profile
    (``$XDG_CONFIG_HOME/sandtrap/profiles/NAME.toml``) or a file (a path has a
    ``/`` or ends in ``.toml``). Raises :class:`sandtrap.PolicyError` naming the
    file, line and key of every problem, :class:`sandtrap.NotFound` when there is
    no such profile."""
    s = os.fspath(name_or_path)
    if isinstance(name_or_path, os.PathLike) and "/" not in s and not s.endswith(".toml"):
        s = "./" + s
    # the library's copy of the environment is the one it was loaded with: send ours
    req = {"load": s, "config_home": os.environ.get("XDG_CONFIG_HOME", ""), "home": os.environ.get("HOME", "")}
    profile = _call(req)["profile"]
    return dict(profile)


def policy_from_dict(profile: Mapping[str, Any], source: str = "<dict>") -> dict[str, Any]:
    """Keyword arguments of :class:`sandtrap.Sandbox` for a profile given as sections
    of keys (what :func:`load_profile` returns); ``[program]`` ``exec`` and ``args``
    are not Sandbox arguments and are left out (see :func:`profile_argv`)."""
    resp = _call({"dict": dict(profile), "source": source})
    policy: dict[str, Any] = resp["policy"]
    return {KEYWORDS.get(k, k): v for k, v in policy.items()}


def profile_argv(profile: Mapping[str, Any]) -> list[str] | None:
    """The program of a profile's ``[program]`` (``exec`` then ``args``), or None."""
    resp = _call({"dict": dict(profile), "source": "<dict>"})
    argv = resp.get("argv")
    return list(argv) if argv else None


__all__ = ["load_profile", "policy_from_dict", "profile_argv"]

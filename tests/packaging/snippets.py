#!/usr/bin/env python3
"""Doctest for the READMEs: every fenced code block runs as written.

    snippets.py extract OUT README.md bindings/python/README.md bindings/node/README.md
        writes each block to OUT (python -> .py, js -> .mjs or .cjs, c -> .c) with
        OUT/manifest.json, and checks each sh block where it stands: `bash -n`, and
        every `make TARGET` it names is a target of the Makefile (sh blocks are the
        commands that make test runs itself, or that the packaging test runs: they are
        checked, not run here).
    snippets.py run OUT [--python PY] [--node-project DIR] [--cflags FLAGS] [--only LANGS]
        runs the extracted blocks: Python with PY, JavaScript as a file of DIR (a
        project where the sandtrap package is installed), C compiled with cc -std=c99
        -pedantic -Wall -Wextra -Werror FLAGS and run.

A block is one program run in its own process (so `confine()` in one does not
confine the next). A JavaScript block is CommonJS (.cjs) when it uses require() and
no import, else an ES module (.mjs, where top-level await is valid).
Prints one line per block and "snippets: N passed, M failed".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

FENCE = re.compile(r"^```(\w*)\s*$")
LANGS = {
    "python": "py",
    "py": "py",
    "js": "js",
    "javascript": "js",
    "mjs": "js",
    "cjs": "js",
    "c": "c",
    "sh": "sh",
    "bash": "sh",
    "shell": "sh",
}
TIMEOUT = 180


def blocks(path: Path) -> list[tuple[int, str, str]]:
    """(line, language, code) of every fenced block of a markdown file."""
    out, lang, start, buf = [], None, 0, []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        m = FENCE.match(line)
        if lang is None and m:
            lang, start, buf = m.group(1), i, []
        elif lang is not None and line.strip() == "```":
            out.append((start, lang, "\n".join(buf) + "\n"))
            lang = None
        elif lang is not None:
            buf.append(line)
    if lang is not None:
        raise SystemExit(f"{path}:{start}: unterminated code block")
    return out


def js_kind(code: str) -> str:
    esm = re.search(r"^\s*(import|export)\b", code, re.M)
    return "cjs" if ("require(" in code and not esm) else "mjs"


def make_targets(makefile: Path) -> set[str]:
    t = set()
    for line in makefile.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+(?:\s+[A-Za-z0-9_.\-]+)*)\s*:(?!=)", line)
        if m:
            t.update(m.group(1).split())
    return t


def check_sh(code: str, where: str, targets: set[str]) -> str | None:
    r = subprocess.run(["bash", "-n"], input=code, text=True, capture_output=True)
    if r.returncode != 0:
        return f"bash -n: {r.stderr.strip()}"
    for line in code.splitlines():
        words = shlex.split(line, comments=True) if line.strip() else []
        if words[:1] == ["make"]:
            named = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
            missing = [w for w in named if w not in targets]
            if missing:
                return f"make target(s) {missing} are not in the Makefile"
    return None


def extract(out: Path, files: list[Path]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parents[2]
    targets = make_targets(root / "Makefile")
    manifest, failed, checked = [], 0, 0
    for f in files:
        rel = os.path.relpath(f, root)
        for line, lang, code in blocks(f):
            kind = LANGS.get(lang.lower())
            where = f"{rel}:{line}"
            if kind is None:
                print(f"FAIL {where}: a code block without a known language ({lang or 'none'})")
                failed += 1
                continue
            if kind == "sh":
                err = check_sh(code, where, targets)
                checked += 1
                print(
                    f"{'FAIL' if err else 'ok  '} {where} sh: {err or 'bash -n, make targets exist (checked, not run)'}"
                )
                failed += bool(err)
                continue
            ext = js_kind(code) if kind == "js" else kind
            name = re.sub(r"[^A-Za-z0-9]+", "_", rel).strip("_") + f"_{line}.{ext}"
            (out / name).write_text(code)
            manifest.append({"where": where, "lang": kind, "file": name})
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"extracted {len(manifest)} blocks to run, checked {checked} sh blocks")
    return failed


def run(out: Path, python: str | None, node_project: Path | None, cflags: str, only: set[str]) -> int:
    manifest = json.loads((out / "manifest.json").read_text())
    passed = failed = 0
    for s in manifest:
        if s["lang"] not in only:
            continue
        src = out / s["file"]
        if s["lang"] == "py":
            if not python:
                raise SystemExit("--python is needed for Python blocks")
            cmd, cwd = [python, str(src)], out
        elif s["lang"] == "js":
            if not node_project:
                raise SystemExit("--node-project is needed for JavaScript blocks")
            dst = node_project / s["file"]
            shutil.copyfile(src, dst)
            cmd, cwd = ["node", str(dst)], node_project
        else:
            exe = out / (s["file"] + ".bin")
            cc = [
                "cc",
                "-std=c99",
                "-pedantic",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-o",
                str(exe),
                str(src),
                *shlex.split(cflags),
            ]
            r = subprocess.run(cc, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"FAIL {s['where']} c: {' '.join(cc)}\n{r.stdout}{r.stderr}")
                failed += 1
                continue
            cmd, cwd = [str(exe)], out
        try:
            r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)
            ok, detail = r.returncode == 0, (r.stdout + r.stderr).strip()
        except subprocess.TimeoutExpired:
            ok, detail = False, f"timed out after {TIMEOUT}s"
        print(
            f"{'ok  ' if ok else 'FAIL'} {s['where']} {s['file'].rsplit('.', 1)[1]}: "
            + (detail.splitlines()[-1][:100] if ok and detail else detail if not ok else "(no output)")
        )
        passed += ok
        failed += not ok
    print(f"snippets: {passed} passed, {failed} failed")
    return failed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("extract")
    e.add_argument("out", type=Path)
    e.add_argument("files", type=Path, nargs="+")
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--python")
    r.add_argument("--node-project", type=Path)
    r.add_argument("--cflags", default="")
    r.add_argument("--only", default="py,js,c")
    a = ap.parse_args()
    if a.cmd == "extract":
        sys.exit(1 if extract(a.out, [f.resolve() for f in a.files]) else 0)
    sys.exit(1 if run(a.out, a.python, a.node_project, a.cflags, set(a.only.split(","))) else 0)


if __name__ == "__main__":
    main()

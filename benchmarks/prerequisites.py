"""What a benchmark needs, checked before it starts, and said in one sentence.

Why: a newcomer who ran ``python benchmarks/estimates.py`` without the bench extra got
``ModuleNotFoundError: No module named 'matplotlib'`` after the whole simulation. Each
benchmark now names what it needs for the run it was asked for (a figure only when it
writes one, a test bed only when it brings one up) and calls ``check`` first thing: a
missing need ends it before any work, with the sentence of what to install.

    check("benchmarks/estimates.py", [MATPLOTLIB] if not args.no_write else [])
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = "pip install -e '.[bench]', which `make bench` runs"
NO_WRITE = "--no-write, which writes nothing into docs/"


@dataclass(frozen=True)
class Need:
    """Something a benchmark run needs: ``what`` to call it, whether it is ``present``,
    ``how`` to install it, and the option that does without it (``avoid``), if any."""

    what: str
    present: Callable[[], bool]
    how: str
    avoid: str = ""


def module_found(name: str) -> bool:
    """Whether ``import name`` would find the module (without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ValueError:  # in sys.modules without a spec: taken for absent
        return False


def py_spy() -> Path | None:
    """The py-spy binary: beside this Python, in the repository's .venv, or on PATH."""
    places = [Path(sys.executable).parent / "py-spy", REPO / ".venv" / "bin" / "py-spy"]
    if os.environ.get("VIRTUAL_ENV"):
        places.insert(0, Path(os.environ["VIRTUAL_ENV"]) / "bin" / "py-spy")
    found = next((p for p in places if p.is_file()), None)
    on_path = shutil.which("py-spy")
    return found or (Path(on_path) if on_path else None)


MATPLOTLIB = Need("matplotlib", lambda: module_found("matplotlib"), BENCH, NO_WRITE)
PY_SPY = Need("py-spy", lambda: py_spy() is not None, BENCH, NO_WRITE)
HYPOTHESIS = Need("hypothesis", lambda: module_found("hypothesis"),
                  "pip install -e '.[dev]', which `make venv` runs")
GO = Need("Go >= 1.24 on PATH", lambda: shutil.which("go") is not None,
          "from https://go.dev/dl: the test bed's control planes are built with it from the "
          "Go module proxy")
OPENSSL = Need("openssl on PATH", lambda: shutil.which("openssl") is not None,
               "from the system's packages: the test bed's certificates are made with it")
TESTBED = (GO, OPENSSL)
"""What bringing a test bed up needs (the binaries are built on first use, then cached)."""


def missing(needs: Iterable[Need]) -> list[Need]:
    return [need for need in needs if not need.present()]


def sentence(script: str, absent: list[Need]) -> str:
    """One sentence: what ``script`` needs that is absent, and how to install it."""
    groups: dict[str, list[str]] = {}
    for need in absent:
        groups.setdefault(need.how, []).append(need.what)
    wants = " and ".join(f"{' and '.join(whats)} ({how})" for how, whats in groups.items())
    avoid = {need.avoid for need in absent}
    instead = f"; or run it with {avoid.pop()}" if len(avoid) == 1 and "" not in avoid else ""
    return f"{script} did not start: it needs {wants}{instead}."


def check(script: str, needs: Iterable[Need]) -> None:
    """End the benchmark before any work when something it needs is absent."""
    absent = missing(needs)
    if absent:
        raise SystemExit(sentence(script, absent))

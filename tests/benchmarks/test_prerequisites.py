"""Every benchmark checks what it needs before it starts (``benchmarks/prerequisites.py``).

For each benchmark in benchmarks/ that needs more than mcad itself, its ``main`` is run
in process with one need taken away (a module hidden from imports, py-spy or Go off the
PATH) and its first piece of work replaced by a tripwire: it must end with the one
sentence that names what to install, and the tripwire must not fire. With every need
present, the same run reaches the tripwire (so the test can tell the difference).
``benchmarks/dispatch_cycle.py`` needs nothing beyond mcad and is not listed.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
BENCH = "pip install -e '.[bench]'"


class WorkStarted(Exception):
    """A tripwire fired: the benchmark began its work."""


@dataclass(frozen=True)
class Case:
    script: str
    argv: tuple[str, ...]
    work: tuple[str, ...]
    """Names in the script's module whose call is the start of its work."""
    hide: str
    """What is taken away: a module name, or "py-spy", or "go"."""
    says: tuple[str, ...]
    """What the sentence must name."""


CASES = [
    Case("estimates", (), ("measure",), "matplotlib", ("matplotlib", BENCH, "--no-write")),
    Case("fair_sharing", (), ("simulate",), "matplotlib", ("matplotlib", BENCH, "--no-write")),
    Case("topology", ("--no-testbed",), ("trace", "simulate", "run_testbed"), "matplotlib",
         ("matplotlib", BENCH)),
    Case("topology", ("--no-write",), ("trace", "simulate", "run_testbed"), "go",
         ("Go >= 1.24", "go.dev/dl")),
    Case("seed000", (), ("run_system",), "matplotlib", ("matplotlib", BENCH)),
    Case("seed002", (), ("run_system",), "matplotlib", ("matplotlib", BENCH)),
    Case("scale", (), ("testbed",), "matplotlib", ("matplotlib", BENCH)),
    Case("scale", (), ("testbed",), "py-spy", ("py-spy", BENCH)),
    Case("scale", ("--smoke",), ("testbed",), "go", ("Go >= 1.24",)),
    Case("dispatch_e2e", (), ("up",), "go", ("Go >= 1.24",)),
    Case("failover", (), ("up",), "go", ("Go >= 1.24",)),
    Case("soak", (), ("up",), "go", ("Go >= 1.24",)),
    Case("testbed", (), ("build", "big"), "go", ("Go >= 1.24",)),
    Case("fuzz", (), ("in_process", "up"), "hypothesis", ("hypothesis", "'.[dev]'")),
]


def load(monkeypatch: pytest.MonkeyPatch, stem: str) -> ModuleType:
    """The benchmark script as a module (benchmarks/ on the path, as when it is run)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"benchmark_{stem}", BENCHMARKS / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # (its dataclasses look it up)
    spec.loader.exec_module(module)
    return module


def trip(monkeypatch: pytest.MonkeyPatch, module: ModuleType, names: tuple[str, ...]) -> None:
    def tripwire(*_args: object, **_kwargs: object) -> None:
        raise WorkStarted
    for name in names:
        assert hasattr(module, name), f"{module.__name__} has no {name}"
        monkeypatch.setattr(module, name, tripwire)


def everything_present(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    prerequisites = load(monkeypatch, "prerequisites")
    monkeypatch.setitem(sys.modules, "prerequisites", prerequisites)
    monkeypatch.setattr(prerequisites, "module_found", lambda _name: True)
    monkeypatch.setattr(prerequisites, "py_spy", lambda: Path("/usr/bin/py-spy"))
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    return prerequisites


def take_away(monkeypatch: pytest.MonkeyPatch, prerequisites: ModuleType, what: str) -> None:
    if what == "py-spy":
        monkeypatch.setattr(prerequisites, "py_spy", lambda: None)
    elif what == "go":
        monkeypatch.setattr(shutil, "which", lambda name: None if name == "go"
                            else f"/usr/bin/{name}")
    else:  # hidden from imports, as when it is not installed
        monkeypatch.setitem(sys.modules, what, None)
        monkeypatch.setattr(prerequisites, "module_found", lambda name: name != what)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.script}-{c.hide}")
def test_a_missing_need_ends_the_benchmark_with_a_sentence_before_any_work(
        case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    prerequisites = everything_present(monkeypatch)
    take_away(monkeypatch, prerequisites, case.hide)
    module = load(monkeypatch, case.script)
    trip(monkeypatch, module, case.work)
    monkeypatch.setattr(sys, "argv", [f"benchmarks/{case.script}.py", *case.argv])
    with pytest.raises(SystemExit) as ended:
        module.main()
    sentence = str(ended.value.code)
    assert sentence.startswith(f"benchmarks/{case.script}.py did not start: it needs ")
    assert sentence.endswith(".") and sentence.count(". ") == 0, sentence  # one sentence
    for word in case.says:
        assert word in sentence, sentence


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.script}-{c.hide}")
def test_with_every_need_present_the_benchmark_starts_its_work(
        case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    everything_present(monkeypatch)
    module = load(monkeypatch, case.script)
    trip(monkeypatch, module, case.work)
    monkeypatch.setattr(sys, "argv", [f"benchmarks/{case.script}.py", *case.argv])
    with pytest.raises(WorkStarted):
        module.main()


def test_the_smokes_in_make_test_need_no_bench_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """``make test`` runs the estimates and scale smokes in a venv without the bench
    extra: neither may ask for matplotlib or py-spy."""
    for stem in ("estimates", "scale"):
        prerequisites = everything_present(monkeypatch)
        take_away(monkeypatch, prerequisites, "matplotlib")
        take_away(monkeypatch, prerequisites, "py-spy")
        module = load(monkeypatch, stem)
        trip(monkeypatch, module, ("measure",) if stem == "estimates" else ("testbed",))
        monkeypatch.setattr(sys, "argv", [f"benchmarks/{stem}.py", "--smoke"])
        with pytest.raises(WorkStarted):
            module.main()


def test_one_sentence_names_every_missing_need_with_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    prerequisites = load(monkeypatch, "prerequisites")
    both = prerequisites.sentence("benchmarks/scale.py", [
        prerequisites.MATPLOTLIB, prerequisites.PY_SPY])
    assert both == ("benchmarks/scale.py did not start: it needs matplotlib and py-spy (pip "
                    "install -e '.[bench]', which `make bench` runs); or run it with "
                    "--no-write, which writes nothing into docs/.")
    text = prerequisites.sentence("benchmarks/scale.py", [
        prerequisites.MATPLOTLIB, prerequisites.PY_SPY, prerequisites.GO])
    assert text == (
        "benchmarks/scale.py did not start: it needs matplotlib and py-spy (pip install -e "
        "'.[bench]', which `make bench` runs) and Go >= 1.24 on PATH (from "
        "https://go.dev/dl: the test bed's control planes are built with it from the Go "
        "module proxy).")
    alone = prerequisites.sentence("benchmarks/estimates.py", [prerequisites.MATPLOTLIB])
    assert alone == ("benchmarks/estimates.py did not start: it needs matplotlib (pip "
                     "install -e '.[bench]', which `make bench` runs); or run it with "
                     "--no-write, which writes nothing into docs/.")

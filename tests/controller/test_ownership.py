"""One writer per part of an AppWrapper's record, enforced by reading the source.

``controller/records.py`` gives each part of a record one owner: the dispatcher writes
``Orders``, the reconciler's steps write ``Progress``, and ``Observed`` changes only
through ``take``, called by the hub informer and by the hub writer with the answers to
mcad's writes. This test parses every module of ``mcad`` and fails, naming the line,
when any other module writes a part it does not own; a second test shows the check
itself finds such a write.
"""

from __future__ import annotations

import ast
from pathlib import Path

MCAD = Path(__file__).resolve().parents[2] / "mcad"

OWNERS = {
    "orders": {"controller/dispatcher.py"},
    "progress": {"controller/admission.py", "controller/creation.py",
                 "controller/lifecycle.py", "controller/objects.py",
                 "controller/reconciler.py", "controller/resets.py"},
}
TAKERS = {"controller/hub.py", "controller/writer.py", "controller/records.py"}
"""Modules that may call ``Observed.take`` (``records.py``: ``AppWrapperRecord.of``)."""


def _parts(target: ast.expr) -> list[str]:
    """The attribute names along an assignment target: ``rec.orders.dispatch`` ->
    ["orders", "dispatch"]."""
    names: list[str] = []
    node = target
    while isinstance(node, ast.Attribute | ast.Subscript):
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
        node = node.value
    return list(reversed(names))


def violations(source: str, module: str) -> list[str]:
    """Writes in ``source`` (the module ``module``, relative to mcad/) to record parts it
    does not own."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            for target in node.targets:
                targets.extend(target.elts if isinstance(target, ast.Tuple) else [target])
        elif isinstance(node, ast.AugAssign | ast.AnnAssign) and node.value is not None:
            targets.append(node.target)
        for target in targets:
            parts = _parts(target)
            for part, owners in OWNERS.items():
                writes = part in parts[:-1] or (len(parts) > 1 and parts[-1] == part)
                if writes and module not in owners:
                    found.append(f"{module}:{node.lineno} writes {'.'.join(parts)}, "
                                     f"owned by {', '.join(sorted(owners))}")
            if "observed" in parts[:-1] and module != "controller/records.py":
                found.append(f"{module}:{node.lineno} assigns into the observed object")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "take" and _parts(node.func.value)[-1:] == ["observed"] \
                and module not in TAKERS:
            found.append(f"{module}:{node.lineno} calls observed.take, which only "
                         f"{', '.join(sorted(TAKERS))} may")
    return found


def test_every_part_of_a_record_is_written_by_its_owner_only() -> None:
    found = []
    for path in sorted(MCAD.rglob("*.py")):
        module = path.relative_to(MCAD).as_posix()
        found += violations(path.read_text(), module)
    assert found == []


def test_the_check_finds_a_write_by_another_module() -> None:
    source = ("def f(rec):\n"
              "    rec.orders.dispatch = None\n"
              "    rec.progress.hold_until, x = None, 1\n"
              "    rec.progress.persist_failures += 1\n"
              "    rec.observed.take({})\n")
    assert violations(source, "controller/lifecycle.py") == [
        "controller/lifecycle.py:2 writes orders.dispatch, owned by controller/dispatcher.py",
        "controller/lifecycle.py:5 calls observed.take, which only controller/hub.py, "
        "controller/records.py, controller/writer.py may"]
    assert len(violations(source, "controller/dispatcher.py")) == 3

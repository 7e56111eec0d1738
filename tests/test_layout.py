"""The package's layout holds: no import hides inside a function body.

Why: an import inside a function is how a circle between modules gets hidden from the
import linter (``mcad.core.placement`` once reached ``domainfit`` that way, three
times). The layers contracts in ``pyproject.toml`` only see imports at module level, so
this test keeps them there. An import that must wait (a heavy module only a rare path
needs) stays allowed when a comment just above it says why.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mcad"


def _function_imports(path: Path) -> list[tuple[int, str]]:
    source = path.read_text()
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Import | ast.ImportFrom):
                found.append((inner.lineno, lines[inner.lineno - 1].strip()))
    return sorted(set(found))


def _explained(path: Path, lineno: int) -> bool:
    """A comment that is more than a linter's code, on the lines just above the import
    (through any imports stacked with it)."""
    lines = path.read_text().splitlines()
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith(("from ", "import ")):
        i -= 1
    return i >= 0 and lines[i].strip().startswith("#") and "noqa" not in lines[i]


def test_the_checker_finds_an_import_in_a_function(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    import json\n    return json\n\n"
                      "async def g():\n    # the reason\n    from os import path\n")
    assert _function_imports(sample) == [(2, "import json"), (7, "from os import path")]
    assert not _explained(sample, 2)
    assert _explained(sample, 7)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_no_import_inside_a_function_without_a_reason(path: Path) -> None:
    hidden = [f"{path.relative_to(PACKAGE.parent)}:{lineno}: {line}"
              for lineno, line in _function_imports(path) if not _explained(path, lineno)]
    assert not hidden, ("imports inside functions hide the module graph from the layers "
                        "contracts; move them to the top, or say why in a comment just "
                        f"above: {hidden}")

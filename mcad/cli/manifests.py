"""Reading Kubernetes manifests the way kubectl does: files, directories, stdin, many documents.

Why its own module: ``mcad validate`` reads manifests now, and ``mcad run``/``mcad
cluster`` will; each document must keep where it came from (file, document number,
line) so every sentence about it can say where to look. YAML errors become sentences
with line and column; ``kind: List`` documents are opened into their items.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import yaml

STDIN = "-"
SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Document:
    """One decoded document and where it came from."""

    source: str
    """The file as the user named it, or ``<stdin>``."""
    index: int
    """1-based position in its stream."""
    count_hint: bool
    """True when the stream holds more than one document (so the index is worth saying)."""
    line: int
    """1-based line where the document starts."""
    data: object
    item: int | None = None
    """0-based position inside a ``kind: List``, when it came from one."""

    @property
    def where(self) -> str:
        """``train.yaml``, ``all.yaml (document 2)``, ``list.yaml (document 1, items[3])``."""
        parts = []
        if self.count_hint:
            parts.append(f"document {self.index}")
        if self.item is not None:
            parts.append(f"items[{self.item}]")
        return f"{self.source} ({', '.join(parts)})" if parts else self.source


@dataclass(frozen=True)
class ReadProblem:
    """Something that kept documents from being read; ``sentence`` says what and where."""

    sentence: str


def read(paths: Sequence[str], *, stdin: IO[str] | None = None
         ) -> Iterator[Document | ReadProblem]:
    """Every document of every path (``-`` is stdin; directories are walked, sorted)."""
    for name in paths:
        if name == STDIN:
            yield from _read_stream("<stdin>", (stdin or sys.stdin).read())
            continue
        path = Path(name)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
            if not files:
                yield ReadProblem(f"{name}: the directory holds no .yaml, .yml or .json files.")
            for file in files:
                yield from _read_file(str(file))
        else:
            yield from _read_file(name)


def _read_file(name: str) -> Iterator[Document | ReadProblem]:
    try:
        text = Path(name).read_text(encoding="utf-8")
    except FileNotFoundError:
        yield ReadProblem(f"{name}: no such file or directory.")
        return
    except UnicodeDecodeError:
        yield ReadProblem(f"{name}: the file is not UTF-8 text; is it a YAML manifest?")
        return
    except OSError as err:
        yield ReadProblem(f"{name}: cannot be read ({err.strerror or err}).")
        return
    yield from _read_stream(name, text)


def _read_stream(source: str, text: str) -> Iterator[Document | ReadProblem]:
    decoded: list[tuple[int, int, object]] = []  # (index, line, data)
    failure: ReadProblem | None = None
    index = 0
    loader = yaml.SafeLoader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            index += 1
            if node is None:
                continue
            data = loader.construct_document(node)
            if data is not None:
                decoded.append((index, node.start_mark.line + 1, data))
    except yaml.MarkedYAMLError as err:
        failure = ReadProblem(_yaml_sentence(source, err))
    except yaml.YAMLError as err:
        failure = ReadProblem(f"{source}: the YAML is malformed ({err}).")
    finally:
        loader.dispose()
    multi = index > 1
    for position, line, data in decoded:
        if isinstance(data, dict) and data.get("kind") == "List" and isinstance(
                data.get("items"), list):
            for item, obj in enumerate(data["items"]):
                yield Document(source, position, multi, line, obj, item=item)
        else:
            yield Document(source, position, multi, line, data)
    if failure is not None:
        yield failure
    elif not decoded:
        yield ReadProblem(f"{source}: holds no Kubernetes objects (the stream is empty).")


def _yaml_sentence(source: str, err: yaml.MarkedYAMLError) -> str:
    mark = err.problem_mark or err.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
    problem = err.problem or "a syntax error"
    context = f" {err.context}" if err.context else ""
    return (f"{source}: the YAML is malformed at {where}: {problem}{context}; "
            "fix the indentation or quoting there.")

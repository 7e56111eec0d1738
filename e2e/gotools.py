"""Go tools the tests need beyond the test bed (promtool, the JobSet controller), each
built from its own Go module folder under ``e2e/`` (a go.mod with a ``tool`` line, and
its go.sum) into the test bed's cache folder, keyed by that go.mod, go.sum and the Go
version: built once per machine (it says it is alive every 30 s), reused after. Apart
from the test bed's own key, so adding a tool never rebuilds Kubernetes.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable
from pathlib import Path

from e2e.cluster.build import BuildError, _go, cache_root, go_env, go_version

E2E = Path(__file__).resolve().parent


def tool(folder: str, package: str, name: str, *,
         log: Callable[[str], object] = print) -> Path:
    """The binary of ``package`` built from ``e2e/<folder>`` (built now unless cached)."""
    module = E2E / folder
    digest = hashlib.sha256(go_version().encode())
    for file in ("go.mod", "go.sum"):
        digest.update((module / file).read_bytes())
    target = cache_root() / f"{name}-{digest.hexdigest()[:16]}" / name
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{name}.partial")
    _go(["build", "-trimpath", "-ldflags", "-s -w", "-o", str(partial), package], module, log,
        what=f"{name} (first time on this machine: a few minutes)")
    partial.rename(target)
    return target


def module_dir(folder: str, module: str) -> Path:
    """Where the Go module cache holds ``module`` as ``e2e/<folder>`` requires it (for
    files that ship with it, such as a CRD)."""
    proc = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", module], cwd=E2E / folder,
                          env=go_env(), capture_output=True, text=True, check=False)
    found = Path(proc.stdout.strip())
    if proc.returncode != 0 or not found.is_dir():
        raise BuildError(f"the module {module} is not in the Go module cache: "
                         f"{proc.stderr.strip()[-300:]}")
    return found

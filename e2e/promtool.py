"""Unit tests of mcad's alert rules, run by Prometheus's own ``promtool test rules``.

    python -m e2e.promtool          # make rules (part of make test)

promtool is built from the Prometheus Go module pinned in ``e2e/promtool/go.mod`` (the
module proxy, never vendored, nothing committed), into the test bed's cache folder,
keyed by that go.mod, its go.sum and the Go version: the first build takes a few minutes
(it says it is alive every 30 s), later runs reuse it. The rules are the ones the
prometheus overlay installs: the PrometheusRule's groups are written to a plain rule
file beside the tests (``manifests/overlays/prometheus/tests/rules-test.yaml``: for
every alert, a case where it fires and one where it does not), and promtool evaluates
them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml

from e2e.cluster.build import BuildError
from e2e.gotools import tool

REPO = Path(__file__).resolve().parents[1]
OVERLAY = REPO / "manifests" / "overlays" / "prometheus"
TESTS = OVERLAY / "tests" / "rules-test.yaml"


def promtool(log: Callable[[str], object] = print) -> Path:
    """The built promtool (built now unless the cache has it)."""
    return tool("promtool", "github.com/prometheus/prometheus/cmd/promtool", "promtool",
                log=log)


def rule_file() -> dict[str, object]:
    """The PrometheusRule's groups, as a plain Prometheus rule file."""
    rule = yaml.safe_load((OVERLAY / "prometheusrule.yaml").read_text())
    return {"groups": rule["spec"]["groups"]}


def main() -> int:
    try:
        tool = promtool()
    except BuildError as err:
        print(f"promtool build: {err}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mcad-rules-") as tmp:
        work = Path(tmp)
        (work / "rules.yaml").write_text(yaml.safe_dump(rule_file(), sort_keys=False))
        shutil.copyfile(TESTS, work / TESTS.name)
        proc = subprocess.run([str(tool), "test", "rules", TESTS.name], cwd=work,
                              check=False)
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())

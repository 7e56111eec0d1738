"""``kubectl mcad``: the console script ``kubectl-mcad`` runs the same entry point as
``mcad``, calls itself ``kubectl mcad`` in its usage, and ``queue``/``explain`` parse the
flags kubectl users type (``-n``, ``--kubeconfig``, ``--context``) as kubectl passes them
through. Running it under kubectl on the test bed is in e2e/."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from mcad.cli import kubectl, queue
from mcad.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def test_the_plugin_is_the_same_entry_point_as_mcad() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-mcad"] == scripts["mcad"] == "mcad.cli.main:main"


def test_queue_parses_kubectl_flags() -> None:
    args = build_parser().parse_args(["queue", "-n", "team-a", "--kubeconfig", "X",
                                      "--context", "Y"])
    assert args.command is queue.run_queue
    assert (args.namespace, args.hub_kubeconfig, args.context) == ("team-a", Path("X"), "Y")
    assert not args.all_namespaces


def test_explain_parses_kubectl_flags_in_kubectls_spelling() -> None:
    args = build_parser().parse_args(["explain", "train", "--namespace=team-a",
                                      "--kubeconfig=X", "--context=Y"])
    assert args.command is queue.run_explain
    assert (args.name, args.namespace, args.hub_kubeconfig, args.context) \
        == ("train", "team-a", Path("X"), "Y")


def test_without_kubectl_flags_mcads_own_apply() -> None:
    args = build_parser().parse_args(["queue", "--hub-kubeconfig", "H"])
    assert (args.hub_kubeconfig, args.context) == (Path("H"), None)
    args = build_parser().parse_args(["queue"])
    assert (args.namespace, args.hub_kubeconfig, args.context) == ("default", None, None)


@pytest.mark.parametrize(("argv0", "prog"), [
    ("/usr/local/bin/kubectl-mcad", "kubectl mcad"),
    ("kubectl-mcad.exe", "kubectl mcad"),
    ("/usr/local/bin/mcad", "mcad"),
    ("python -m mcad.cli", "mcad"),
])
def test_usage_names_the_command_as_typed(argv0: str, prog: str) -> None:
    assert kubectl.program_name(argv0) == prog


def test_usage_as_a_plugin_says_kubectl_mcad(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.argv", ["/usr/local/bin/kubectl-mcad", "queue", "--bogus"])
    assert main(["queue", "--bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: kubectl mcad ")
    assert "kubectl mcad: error: unrecognized arguments: --bogus" in err

"""MCAD's command-line flags as ``mcad run`` takes them: the "same" rows of
docs/mcad-compatibility.md section 15. MCAD's flags, as read in its
cmd/kar-controllers/app/options/options.go: ``--kubeconfig`` names the cluster it
watches; ``--master`` overrides its server; ``--externalDispatch`` is not a flag of any
MCAD release (it appears only in unmerged pull requests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcad.cli.main import main


def test_kubeconfig_names_the_cluster_mcad_watches(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "hub.kubeconfig"
    code = main(["run", "--kubeconfig", str(missing), "--metrics-address", "127.0.0.1:0"])
    assert code == 1
    assert capsys.readouterr().err.strip() == (
        f"mcad run: the hub kubeconfig {missing} cannot be used: cannot read kubeconfig "
        f"{missing}: No such file or directory")


@pytest.mark.parametrize("flag", [["--master", "https://hub:6443"], ["--externalDispatch"]])
def test_flags_mcad_run_does_not_have_are_refused(flag: list[str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", *flag]) == 2
    assert f"unrecognized arguments: {' '.join(flag)}" in capsys.readouterr().err

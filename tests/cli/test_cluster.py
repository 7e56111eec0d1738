"""``mcad cluster``: the command line (names, labels, --kubeconfig xor --local), spoke
kubeconfig files that cannot work (each one sentence, exit 1, before the hub is
contacted), the objects register would write, the list table, and a hub that is
unreachable or lacks the CRDs. What register/unregister/list do on a real API server is
in e2e/test_cluster_cli.py."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from mcad.cli import cluster
from mcad.cli.main import build_parser, main

GOOD_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: spoke-1
  cluster: {server: "https://127.0.0.1:6443", certificate-authority-data: Zm9v}
users:
- name: admin
  user: {token: abc}
contexts:
- name: spoke-1
  context: {cluster: spoke-1, user: admin}
current-context: spoke-1
"""


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def kubeconfig_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spoke.kubeconfig"
    path.write_text(text)
    return path


# -- the command line ------------------------------------------------------------------------

def test_cluster_needs_a_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["cluster"], capsys)
    assert code == 2
    assert "register" in err and "Traceback" not in err


def test_register_needs_kubeconfig_or_local(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["cluster", "register", "spoke-1"], capsys)
    assert code == 2
    assert "one of the arguments --kubeconfig --local is required" in err


def test_register_takes_kubeconfig_or_local_not_both(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = kubeconfig_file(tmp_path, GOOD_KUBECONFIG)
    code, _, err = run(["cluster", "register", "spoke-1", "--local", "--kubeconfig", str(path)],
                       capsys)
    assert code == 2
    assert "not allowed with argument" in err


def test_register_arguments_and_defaults() -> None:
    args = build_parser().parse_args(
        ["cluster", "register", "spoke-1", "--kubeconfig", "k.yaml", "--label", "zone=a",
         "--label", "example.com/gpu=a100", "--label", "empty="])
    assert args.command is cluster.register
    assert (args.name, args.kubeconfig, args.local) == ("spoke-1", Path("k.yaml"), False)
    assert args.labels == [("zone", "a"), ("example.com/gpu", "a100"), ("empty", "")]
    assert (args.key, args.namespace, args.unschedulable) == \
        ("kubeconfig", "mcad-system", False)
    assert args.hub_kubeconfig is None


def test_unregister_and_list_are_registered() -> None:
    parser = build_parser()
    assert parser.parse_args(["cluster", "unregister", "spoke-1"]).command is cluster.unregister
    args = parser.parse_args(["cluster", "list", "--hub-kubeconfig", "hub.yaml"])
    assert (args.command, args.hub_kubeconfig) == (cluster.list_clusters, Path("hub.yaml"))


@pytest.mark.parametrize(("argv", "says"), [
    (["register", "Spoke_1", "--local"], "'Spoke_1' is not a cluster name"),
    (["register", "s", "--local", "--label", "zone"], "'zone' is not KEY=VALUE"),
    (["register", "s", "--local", "--label", "bad key=x"], "'bad key=x' is not KEY=VALUE"),
    (["register", "s", "--local", "--label=-zone=x"], "'-zone=x' is not KEY=VALUE"),
    (["register", "s", "--local", "--label", "zone=not ok"], "has a value that is not a label"),
    (["register", "s", "--local", "--label", f"zone={'a' * 64}"], "at most 63"),
    (["register", "s", "--local", "--namespace", "MCAD"], "'MCAD' is not a namespace name"),
    (["register", "s", "--local", "--key", "a/b"], "'a/b' is not a Secret key"),
    (["unregister", "a" * 250], "is not a cluster name"),
])
def test_bad_arguments_are_usage_errors(argv: list[str], says: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["cluster", *argv], capsys)
    assert (code, out) == (2, "")
    assert says in err


# -- spoke kubeconfig files that cannot work -------------------------------------------------

UNREACHABLE_HUB = ["--hub-kubeconfig", "/nonexistent/hub.kubeconfig"]


@pytest.mark.parametrize(("text", "says"), [
    ("clusters: [\n", "is not valid YAML at line 2"),
    ("", "names no clusters; give the kubeconfig of the spoke"),
    ("- a list", "names no clusters"),
    ("apiVersion: v1\nkind: Config\nclusters: []\n", "names no clusters"),
    ("clusters:\n- name: spoke-1\n  cluster: {}\n",
     "has a cluster 'spoke-1' without a server address"),
    (GOOD_KUBECONFIG.replace("certificate-authority-data: Zm9v",
                             "certificate-authority: /etc/ca.crt"),
     "refers to the file /etc/ca.crt (certificate-authority), which the controller cannot "
     "read; embed the files with kubectl config view --flatten --minify"),
    (GOOD_KUBECONFIG.replace("token: abc", "client-key: key.pem"),
     "refers to the file key.pem (client-key)"),
])
def test_a_bad_spoke_kubeconfig_is_one_sentence_before_the_hub_is_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, says: str
) -> None:
    path = kubeconfig_file(tmp_path, text)
    # The hub kubeconfig does not exist: had register gone on to the hub, it would say so.
    code, out, err = run(["cluster", "register", "spoke-1", "--kubeconfig", str(path),
                          *UNREACHABLE_HUB], capsys)
    assert (code, out) == (1, "")
    assert err.startswith(f"mcad cluster register: the kubeconfig {path} ")
    assert says in err
    assert err.count("\n") == 1 and err.endswith(".\n")


def test_a_missing_spoke_kubeconfig_is_one_sentence(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["cluster", "register", "spoke-1", "--kubeconfig",
                        str(tmp_path / "nope"), *UNREACHABLE_HUB], capsys)
    assert code == 1
    assert err == (f"mcad cluster register: cannot read the kubeconfig {tmp_path}/nope: "
                   "No such file or directory.\n")


def test_a_good_spoke_kubeconfig_is_kept_byte_for_byte(tmp_path: Path) -> None:
    path = kubeconfig_file(tmp_path, GOOD_KUBECONFIG + "# a comment stays\n")
    assert cluster.read_spoke_kubeconfig(path) == path.read_bytes()


# -- the objects register writes -----------------------------------------------------------

def test_the_secret_holds_the_kubeconfig_base64_under_the_key() -> None:
    secret = cluster.secret_object("spoke-1", namespace="mcad-system", key="config",
                                   kubeconfig=b"apiVersion: v1\n")
    assert secret["metadata"] == {"name": "spoke-1-kubeconfig", "namespace": "mcad-system",
                                  "labels": {"cluster.codeflare.dev/spoke": "spoke-1"}}
    assert secret["type"] == "Opaque"
    assert base64.b64decode(secret["data"]["config"]) == b"apiVersion: v1\n"


def test_spoke_specs_for_a_remote_cluster_and_for_the_hub_itself() -> None:
    assert cluster.spoke_spec(secret_name="s-kubeconfig", key="kubeconfig",
                              labels={"zone": "a"}, unschedulable=True) == {
        "kubeconfigSecret": {"name": "s-kubeconfig", "key": "kubeconfig"},
        "labels": {"zone": "a"}, "unschedulable": True}
    assert cluster.spoke_spec(secret_name=None, key="kubeconfig", labels={},
                              unschedulable=False) == {
        "local": True, "labels": {}, "unschedulable": False}


# -- the list table --------------------------------------------------------------------------

NOW = datetime(2025, 1, 2, 12, 0, 0, tzinfo=UTC)


def spoke(name: str, *, created: str = "2025-01-02T11:59:15Z", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created},
            "spec": {"local": True}, "status": status}


def test_the_table_is_sorted_with_one_row_per_spoke() -> None:
    rows = cluster.table([
        spoke("spoke-2", created="2024-12-30T12:00:00Z", lastSyncTime="2025-01-02T11:59:59Z",
              conditions=[{"type": "Ready", "status": "False", "reason": "Unreachable"}],
              nodes=4, readyNodes=0, free={}),
        spoke("spoke-1", lastSyncTime="2025-01-02T11:59:59Z",
              conditions=[{"type": "Ready", "status": "True", "reason": "Synced"}],
              nodes=4, readyNodes=4, free={"cpu": "120", "nvidia.com/gpu": "28"}),
        spoke("spoke-3", created="2025-01-02T09:00:00Z"),  # never synced
    ], now=NOW).splitlines()
    assert [row.split() for row in rows] == [
        ["NAME", "READY", "REASON", "NODES", "GPUS-FREE", "AGE"],
        ["spoke-1", "True", "Synced", "4/4", "28", "45s"],
        ["spoke-2", "False", "Unreachable", "0/4", "0", "3d"],
        ["spoke-3", "-", "-", "-", "-", "3h"],
    ]
    assert rows[1].index("Synced") == rows[0].index("REASON")  # columns line up


def test_no_spokes_is_a_sentence() -> None:
    assert cluster.table([], now=NOW) == "No SpokeClusters are registered."


@pytest.mark.parametrize(("created", "want"), [
    ("2025-01-02T12:00:00Z", "0s"), ("2025-01-02T11:58:01Z", "119s"),
    ("2025-01-02T11:58:00Z", "2m"), ("2025-01-02T10:00:01Z", "119m"),
    ("2025-01-02T10:00:00Z", "2h"), ("2024-12-31T12:00:01Z", "47h"),
    ("2024-12-31T12:00:00Z", "2d"), ("2025-01-02T12:00:30Z", "0s"),
    (None, "-"), ("yesterday", "-"),
])
def test_age_as_kubectl_shows_it(created: str | None, want: str) -> None:
    assert cluster.age(created, now=NOW) == want


# -- hubs that cannot help -------------------------------------------------------------------

def hub_kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "hub.kubeconfig"
    path.write_text(GOOD_KUBECONFIG.replace('"https://127.0.0.1:6443"', f'"{server}"'))
    return path


@pytest.fixture
async def crdless_hub() -> AsyncIterator[str]:
    """An HTTP server answering every request as an API server without mcad's CRDs."""
    async def not_found(request: web.Request) -> web.Response:
        return web.Response(status=404, text="404 page not found\n")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", not_found)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def test_a_hub_without_the_crds_says_to_install_them(
    tmp_path: Path, crdless_hub: str, capsys: pytest.CaptureFixture[str]
) -> None:
    hub = hub_kubeconfig(tmp_path, crdless_hub)
    code = await asyncio.to_thread(main, ["cluster", "list", "--hub-kubeconfig", str(hub)])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err == ("mcad cluster list: the hub does not serve SpokeClusters "
                   "(cluster.codeflare.dev/v1alpha1); install mcad's CRDs first: kubectl "
                   "apply -k crds/.\n")


def test_an_unreachable_hub_is_one_sentence(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    hub = hub_kubeconfig(tmp_path, "http://127.0.0.1:1")
    code, out, err = run(["cluster", "unregister", "spoke-1", "--hub-kubeconfig", str(hub)],
                         capsys)
    assert (code, out) == (1, "")
    assert err.startswith("mcad cluster unregister: cannot reach the hub (")
    assert err.endswith(f"check the hub kubeconfig {hub} (--hub-kubeconfig, or $KUBECONFIG).\n")


def test_a_hub_kubeconfig_with_a_bad_certificate_is_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hub = hub_kubeconfig(tmp_path, "https://127.0.0.1:1")  # its CA data is not a certificate
    code, out, err = run(["cluster", "list", "--hub-kubeconfig", str(hub)], capsys)
    assert (code, out) == (1, "")
    assert err == (f"mcad cluster list: the hub kubeconfig {hub} cannot be used: its "
                   "certificate-authority-data is not a valid PEM certificate.\n")


def test_the_hub_kubeconfig_defaults_to_the_kubeconfig_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    code, _, err = run(["cluster", "list"], capsys)
    assert code == 1
    assert err == (f"mcad cluster list: the hub kubeconfig {first} cannot be used: cannot read "
                   f"kubeconfig {first}: No such file or directory.\n")

"""The hub's own kubeconfig and the in-cluster service account, read by mcad itself:
files are read (relative to the kubeconfig, as kubectl does), a chosen context is
honoured, only what needs a program goes to kubernetes_asyncio's loader, and the
controller's process never imports kubernetes_asyncio for a plain kubeconfig (its
package imports every API model: 36 MB of resident memory)."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcad.gateway import connection
from mcad.gateway.connection import connect, connect_in_cluster
from mcad.gateway.errors import BadKubeconfig
from mcad.gateway.kubeconfig import parse_trusted
from mcad.webhook.certs import new_ca, new_serving_cert


def doc(user: dict[str, Any], cluster: dict[str, Any] | None = None,
        current: str = "c") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": current,
            "clusters": [{"name": "k", "cluster": cluster or {"server": "https://10.0.0.1:6443"}},
                         {"name": "other", "cluster": {"server": "https://10.9.9.9:6443"}}],
            "users": [{"name": "u", "user": user}, {"name": "v", "user": {"token": "vt"}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}},
                         {"name": "d", "context": {"cluster": "other", "user": "v"}}]}


def test_files_are_read_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    ca_cert, ca_key = new_ca(now)
    cert, key = new_serving_cert(ca_cert, ca_key, ["client"], now)
    (tmp_path / "ca.crt").write_bytes(ca_cert)
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "c.crt").write_bytes(cert)
    (tmp_path / "pki" / "c.key").write_bytes(key)
    credentials = parse_trusted(doc({"client-certificate": "pki/c.crt",
                                     "client-key": str(tmp_path / "pki" / "c.key")},
                                    {"server": "https://10.0.0.1:6443/",
                                     "certificate-authority": "ca.crt"}), base=tmp_path)
    assert credentials is not None
    assert credentials.server == "https://10.0.0.1:6443"
    assert credentials.ca_pem == ca_cert.decode()
    assert credentials.client_cert_pem == cert and credentials.client_key_pem == key
    assert credentials.ssl_context().verify_mode.name == "CERT_REQUIRED"


def test_a_token_file_and_inline_data(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-a-file\n")
    credentials = parse_trusted(doc({"tokenFile": "token"}), base=tmp_path)
    assert credentials is not None
    assert credentials.headers() == {"Authorization": "Bearer from-a-file"}
    inline = parse_trusted(doc({"token": "t"}, {
        "server": "https://x", "certificate-authority-data": base64.b64encode(b"pem").decode(),
        "insecure-skip-tls-verify": True}))
    assert inline is not None and inline.ca_pem == "pem" and not inline.verify


def test_the_chosen_context_wins_over_the_current_one() -> None:
    credentials = parse_trusted(doc({"token": "t"}), context="d")
    assert credentials is not None
    assert credentials.server == "https://10.9.9.9:6443"
    assert credentials.headers() == {"Authorization": "Bearer vt"}
    with pytest.raises(BadKubeconfig, match="has no context 'nope'"):
        parse_trusted(doc({"token": "t"}), context="nope")


@pytest.mark.parametrize(("user", "cluster"), [
    ({"exec": {"command": "gcloud"}}, None),
    ({"auth-provider": {"name": "oidc"}}, None),
    ({"token": "t"}, {"server": "https://x", "proxy-url": "http://proxy"}),
    ({"token": "t", "as": "someone"}, None),
])
def test_what_needs_kubernetes_asyncios_loader_is_left_to_it(
        user: dict[str, Any], cluster: dict[str, Any] | None) -> None:
    assert parse_trusted(doc(user, cluster)) is None


def test_a_file_that_is_not_a_certificate_is_a_sentence_naming_it(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("not a certificate")
    with pytest.raises(BadKubeconfig, match=r"certificate-authority ca\.crt: not a valid PEM"):
        parse_trusted(doc({"token": "t"}, {"server": "https://x",
                                           "certificate-authority": "ca.crt"}), base=tmp_path)


def test_an_unreadable_file_is_a_sentence_naming_it(tmp_path: Path) -> None:
    with pytest.raises(BadKubeconfig, match=r"certificate-authority .*missing.crt cannot be "
                                            r"read: No such file"):
        parse_trusted(doc({"token": "t"}, {"server": "https://x",
                                           "certificate-authority": "missing.crt"}),
                      base=tmp_path)


async def test_a_plain_kubeconfig_connects_without_kubernetes_asyncio(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(doc({"token": "t"})))
    conn = await connect(path, name="hub")
    try:
        assert conn.host == "https://10.0.0.1:6443"
    finally:
        await conn.close()
    script = ("import asyncio, sys\n"
              "from pathlib import Path\n"
              "import mcad.cli.run\n"
              "from mcad.gateway.connection import connect\n"
              "async def main():\n"
              f"    conn = await connect(Path({str(path)!r}), name='hub')\n"
              "    await conn.close()\n"
              "asyncio.run(main())\n"
              "print(sorted(m for m in sys.modules if m.startswith('kubernetes_asyncio')))\n")
    out = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", script],
                                  capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


async def test_in_cluster_reads_the_mounted_files_and_rereads_the_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = dt.datetime.now(dt.UTC)
    ca_cert, _ = new_ca(now)
    (tmp_path / "ca.crt").write_bytes(ca_cert)
    (tmp_path / "token").write_text("first\n")
    monkeypatch.setattr(connection, "SERVICE_ACCOUNT_DIR", tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    conn = connect_in_cluster(name="hub")
    try:
        assert conn.host == "https://[fd00::1]:443"
        assert await conn._auth() == {"Authorization": "Bearer first"}
        (tmp_path / "token").write_text("rotated\n")
        assert await conn._auth() == {"Authorization": "Bearer first"}  # within a minute
        monkeypatch.setattr(connection, "TOKEN_REREAD_S", -1.0)
        assert await conn._auth() == {"Authorization": "Bearer rotated"}
        (tmp_path / "token").unlink()  # kubelet between two writes: keep the last one
        assert await conn._auth() == {"Authorization": "Bearer rotated"}
    finally:
        await conn.close()


def test_in_cluster_without_the_environment_is_a_sentence(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(BadKubeconfig, match="KUBERNETES_SERVICE_HOST"):
        connect_in_cluster(name="hub")

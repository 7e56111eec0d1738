"""Spoke kubeconfigs read as untrusted input: programs and file references are refused
with a sentence naming the field (never its value), YAML errors say where and not what,
an expired token is refused, and inline credentials become headers and TLS in memory."""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Any

import pytest
import yaml

from mcad.gateway.errors import BadKubeconfig
from mcad.gateway.kubeconfig import parse, private_dir
from mcad.webhook.certs import new_ca, new_serving_cert

SECRET_VALUE = "s3cr3t-do-not-print"


def kubeconfig(user: dict[str, Any], cluster: dict[str, Any] | None = None) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": cluster or {"server": "https://10.0.0.1:6443"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]})


def jwt(exp: float) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    return f"{part({'alg': 'RS256'})}.{part({'exp': exp, 'sub': 'x'})}.signature"


@pytest.mark.parametrize(("user", "cluster", "says"), [
    ({"exec": {"command": "/bin/steal", "args": [SECRET_VALUE]}}, None,
     "runs an exec credential plugin"),
    ({"tokenFile": f"/var/run/{SECRET_VALUE}"}, None, "names a file (tokenFile)"),
    ({"client-certificate": f"/etc/{SECRET_VALUE}", "client-key": "/etc/key"}, None,
     "names a file (client-certificate)"),
    ({"auth-provider": {"name": "oidc", "config": {"secret": SECRET_VALUE}}}, None,
     "uses an auth-provider plugin"),
    ({"token": "t"}, {"server": "https://x", "certificate-authority": f"/{SECRET_VALUE}"},
     "names a file (certificate-authority)"),
    ({"token": "t"}, {"server": "https://x", "proxy-url": f"http://{SECRET_VALUE}"},
     "sets proxy-url"),
    ({"token": "t", "as": SECRET_VALUE}, None, "impersonates (as)"),
    ({"token": "t", "mystery": SECRET_VALUE}, None, "sets mystery, which mcad does not use"),
    ({"token": "t"}, {"server": f"ftp://{SECRET_VALUE}"}, "no http(s) server address"),
    ({"client-certificate-data": base64.b64encode(b"x").decode()}, None,
     "needs both client-certificate-data and client-key-data"),
])
def test_what_a_secret_may_not_do_is_refused_without_quoting_it(
        user: dict[str, Any], cluster: dict[str, Any] | None, says: str) -> None:
    with pytest.raises(BadKubeconfig) as err:
        parse(kubeconfig(user, cluster), allow_exec=False)
    assert says in str(err.value)
    assert SECRET_VALUE not in str(err.value)


def test_an_exec_plugin_is_accepted_only_when_the_operator_opted_in() -> None:
    credentials, _ = parse(kubeconfig({"exec": {"command": "aws"}}), allow_exec=True)
    assert credentials.exec_plugin


def test_a_yaml_error_says_where_not_what() -> None:
    with pytest.raises(BadKubeconfig) as err:
        parse(f"clusters:\n- name: k\n  cluster: {{server: {SECRET_VALUE}\n", allow_exec=False)
    assert "not valid YAML at line" in str(err.value)
    assert SECRET_VALUE not in str(err.value)


def test_an_expired_token_is_refused_with_when() -> None:
    expired = dt.datetime(2020, 1, 2, tzinfo=dt.UTC).timestamp()
    with pytest.raises(BadKubeconfig, match="token expired at 2020-01-02T00:00:00Z"):
        parse(kubeconfig({"token": jwt(expired)}), allow_exec=False)
    fresh = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).timestamp()
    credentials, _ = parse(kubeconfig({"token": jwt(fresh)}), allow_exec=False)
    assert credentials.headers() == {"Authorization": f"Bearer {jwt(fresh)}"}


def test_inline_certificates_make_tls_in_memory_and_leave_no_file() -> None:
    now = dt.datetime.now(dt.UTC)
    ca_cert, ca_key = new_ca(now)
    cert, key = new_serving_cert(ca_cert, ca_key, ["client"], now)
    b64 = base64.b64encode
    credentials, _ = parse(kubeconfig(
        {"client-certificate-data": b64(cert).decode(), "client-key-data": b64(key).decode()},
        {"server": "https://10.0.0.1:6443",
         "certificate-authority-data": b64(ca_cert).decode()}), allow_exec=False)
    before = set(private_dir().iterdir())
    context = credentials.ssl_context()
    assert context.verify_mode.name == "CERT_REQUIRED"
    assert set(private_dir().iterdir()) == before  # the key's file is gone at once
    assert oct(private_dir().stat().st_mode)[-3:] == "700"


@pytest.mark.parametrize("junk", [b"junk", b"\xff\xfe not even text"])
def test_bad_certificate_data_is_a_sentence(junk: bytes) -> None:
    credentials, _ = parse(kubeconfig(
        {"token": "t"}, {"server": "https://x",
                         "certificate-authority-data": base64.b64encode(junk).decode()}),
        allow_exec=False)
    with pytest.raises(BadKubeconfig, match="certificate-authority-data is not a valid PEM"):
        credentials.ssl_context()

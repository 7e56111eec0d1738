"""Certificates and credentials for the test bed, made with the openssl CLI.

One CA signs every apiserver's serving certificate (SANs 127.0.0.1 and localhost),
so kubeconfigs carry real CA data instead of insecure-skip-tls-verify. One
service-account key pair and one static admin token (group system:masters) serve
every cluster: the test bed is a single-user lab, and one credential keeps the
kubeconfigs simple.

The aggregation layer gets what a kubeadm cluster has: a front-proxy CA of its own and
the client certificate (CN ``front-proxy-client``) the API servers present to an
aggregated API server such as mcad's visibility API, which checks it against that CA
(``kube-system/extension-apiserver-authentication``). Tests that act as a tenant get a
client certificate from the cluster CA (``user_kubeconfig``): the API server then
authenticates them as that user, with RBAC deciding what they may do.
"""

from __future__ import annotations

import base64
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Credentials:
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path
    token_file: Path
    token: str
    front_proxy_ca: Path | None = None
    front_proxy_cert: Path | None = None
    front_proxy_key: Path | None = None


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {proc.stderr.strip()}")


def make_credentials(directory: Path) -> Credentials:
    """Create (or reuse) the CA, serving cert, service-account keys and admin token."""
    directory.mkdir(parents=True, exist_ok=True)
    creds = Credentials(
        ca_cert=directory / "ca.crt", serving_cert=directory / "serving.crt",
        serving_key=directory / "serving.key", sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub", token_file=directory / "tokens.csv", token="",
    )
    if not creds.serving_cert.exists():
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
                 "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=mcad-testbed-ca",
                 cwd=directory)
        (directory / "san.cnf").write_text(
            "[v3]\nsubjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
            "extendedKeyUsage=serverAuth\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "serving.key",
                 "-out", "serving.csr", "-subj", "/CN=kube-apiserver", cwd=directory)
        _openssl("x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "3650", "-out", "serving.crt",
                 "-extfile", "san.cnf", "-extensions", "v3", cwd=directory)
        _openssl("genrsa", "-out", "sa.key", "2048", cwd=directory)
        _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
    if not (directory / "front-proxy-client.crt").exists():
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
                 "-keyout", "front-proxy-ca.key", "-out", "front-proxy-ca.crt",
                 "-subj", "/CN=mcad-testbed-front-proxy-ca", cwd=directory)
        (directory / "client.cnf").write_text("[v3]\nextendedKeyUsage=clientAuth\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "front-proxy-client.key",
                 "-out", "front-proxy-client.csr", "-subj", "/CN=front-proxy-client",
                 cwd=directory)
        _openssl("x509", "-req", "-in", "front-proxy-client.csr", "-CA", "front-proxy-ca.crt",
                 "-CAkey", "front-proxy-ca.key", "-CAcreateserial", "-days", "3650",
                 "-out", "front-proxy-client.crt", "-extfile", "client.cnf",
                 "-extensions", "v3", cwd=directory)
    creds = Credentials(**{**creds.__dict__,
                           "front_proxy_ca": directory / "front-proxy-ca.crt",
                           "front_proxy_cert": directory / "front-proxy-client.crt",
                           "front_proxy_key": directory / "front-proxy-client.key"})
    if not creds.token_file.exists():
        token = secrets.token_hex(16)
        creds.token_file.write_text(f'{token},admin,admin-uid,"system:masters"\n')
    token = creds.token_file.read_text().split(",", 1)[0]
    return Credentials(**{**creds.__dict__, "token": token})


def kubeconfig(*, name: str, port: int, creds: Credentials) -> str:
    """A kubeconfig for one cluster that works from the host."""
    ca = base64.b64encode(creds.ca_cert.read_bytes()).decode()
    return f"""apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    server: https://127.0.0.1:{port}
    certificate-authority-data: {ca}
users:
- name: {name}-admin
  user:
    token: {creds.token}
contexts:
- name: {name}
  context:
    cluster: {name}
    user: {name}-admin
current-context: {name}
"""


def user_certificate(directory: Path, *, user: str, groups: tuple[str, ...] = ()
                     ) -> tuple[bytes, bytes]:
    """A client certificate for ``user`` (in ``groups``), signed by the cluster CA under
    ``directory`` (a test bed's ``pki``): the API servers authenticate it as that user.
    Returns (certificate PEM, key PEM)."""
    subject = "/" + "/".join([*(f"O={g}" for g in groups), f"CN={user}"])
    work = directory / "users"
    work.mkdir(exist_ok=True)
    base = work / user
    (work / "client.cnf").write_text("[v3]\nextendedKeyUsage=clientAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{base}.key",
             "-out", f"{base}.csr", "-subj", subject, cwd=directory)
    _openssl("x509", "-req", "-in", f"{base}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "30", "-out", f"{base}.crt",
             "-extfile", str(work / "client.cnf"), "-extensions", "v3", cwd=directory)
    return Path(f"{base}.crt").read_bytes(), Path(f"{base}.key").read_bytes()


def user_kubeconfig(*, server: str, ca: bytes, user: str, cert: bytes, key: bytes) -> str:
    """A kubeconfig that authenticates as ``user`` with its client certificate."""
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()
    return f"""apiVersion: v1
kind: Config
clusters:
- name: hub
  cluster:
    server: {server}
    certificate-authority-data: {b64(ca)}
users:
- name: {user}
  user:
    client-certificate-data: {b64(cert)}
    client-key-data: {b64(key)}
contexts:
- name: {user}
  context:
    cluster: hub
    user: {user}
current-context: {user}
"""

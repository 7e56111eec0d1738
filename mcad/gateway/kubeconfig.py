"""Kubeconfigs from Secrets, read as untrusted input: only inline credentials, no programs.

Why not hand a Secret's kubeconfig to kubernetes_asyncio as it is: a kubeconfig can run
programs (``exec`` credential plugins, ``auth-provider``) and name files (``tokenFile``,
``client-key``, ``certificate-authority``). Anyone who may write a Secret in mcad's
namespace would make the controller run their program, or read its own files and send
them to the kubeconfig's server. So a spoke's kubeconfig is parsed here and allows only:

- the cluster's ``server`` (http or https), ``certificate-authority-data``,
  ``insecure-skip-tls-verify``;
- the user's ``token``, ``client-certificate-data`` with ``client-key-data``, or
  ``username`` with ``password``;
- an ``exec`` plugin only when the operator opted in (``allowExecCredentials``), then run
  by kubernetes_asyncio and re-run before its token expires.

Everything else that would change how mcad connects (file references, auth-provider,
proxy-url, tls-server-name, impersonation) is refused with a sentence that names the
field, never its value. Nothing of the kubeconfig's content goes into an error: a YAML
error says where, not what. Certificate material stays in memory; a client key must
pass through a file for Python's TLS, so it is written to a private directory (0700,
removed at exit) and deleted as soon as it is loaded. A token that is a JWT with an
expiry is checked: an expired one is refused with the time it expired.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import json
import os
import shutil
import ssl
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from mcad.gateway.errors import BadKubeconfig

_CLUSTER_KEYS = {"server", "certificate-authority-data", "insecure-skip-tls-verify",
                 "extensions", "disable-compression"}
_USER_KEYS = {"token", "client-certificate-data", "client-key-data", "username", "password",
              "extensions", "exec"}
_REFUSED = {
    "certificate-authority": "names a file (certificate-authority); embed it as "
                             "certificate-authority-data (kubectl config view --flatten)",
    "client-certificate": "names a file (client-certificate); embed it as "
                          "client-certificate-data (kubectl config view --flatten)",
    "client-key": "names a file (client-key); embed it as client-key-data (kubectl config "
                  "view --flatten)",
    "tokenFile": "names a file (tokenFile); put the token itself in token",
    "auth-provider": "uses an auth-provider plugin, which mcad does not run; use a token "
                     "or a client certificate",
    "proxy-url": "sets proxy-url, which mcad does not support",
    "tls-server-name": "sets tls-server-name, which mcad does not support",
    "as": "impersonates (as), which mcad does not do",
    "as-groups": "impersonates (as-groups), which mcad does not do",
    "as-uid": "impersonates (as-uid), which mcad does not do",
    "as-user-extra": "impersonates (as-user-extra), which mcad does not do",
}


def private_dir() -> Path:
    """A directory only this process can read (0700), removed when the process exits."""
    global _PRIVATE  # noqa: PLW0603 - one per process, made on first use
    if _PRIVATE is None:
        _PRIVATE = Path(tempfile.mkdtemp(prefix="mcad-"))
        os.chmod(_PRIVATE, 0o700)
        atexit.register(shutil.rmtree, _PRIVATE, True)
    return _PRIVATE


_PRIVATE: Path | None = None


def load_cert_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """Load a certificate and key given as PEM bytes: Python's TLS reads them only from
    a file, so they pass through the private directory and are deleted at once."""
    fd, path = tempfile.mkstemp(dir=private_dir(), suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(cert + b"\n" + key)
        ctx.load_cert_chain(path)
    finally:
        Path(path).unlink(missing_ok=True)


@dataclass(frozen=True)
class SpokeCredentials:
    """What a spoke kubeconfig says, checked: where to connect and how to authenticate."""

    server: str
    ca_pem: str | None
    verify: bool
    token: str | None
    client_cert_pem: bytes | None
    client_key_pem: bytes | None
    basic: tuple[str, str] | None
    exec_plugin: bool

    def ssl_context(self) -> ssl.SSLContext:
        """TLS for the server: its CA (in memory) and the client certificate, if any."""
        try:
            ctx = ssl.create_default_context(cadata=self.ca_pem) if self.ca_pem \
                else ssl.create_default_context()
        except (ssl.SSLError, ValueError, TypeError) as err:  # (TypeError: not ASCII)
            raise BadKubeconfig("its certificate-authority-data is not a valid PEM "
                                "certificate") from err
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.client_cert_pem and self.client_key_pem:
            try:
                load_cert_chain(ctx, self.client_cert_pem, self.client_key_pem)
            except (ssl.SSLError, ValueError, OSError) as err:
                raise BadKubeconfig("its client-certificate-data and client-key-data are "
                                    "not a valid certificate and key") from err
        return ctx

    def session(self) -> aiohttp.ClientSession:
        # (read_bufsize: a watch event carries a whole object, up to etcd's 1.5 MiB)
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(
            ssl=self.ssl_context() if self.server.startswith("https://") else False),
            read_bufsize=2**21)

    def headers(self) -> dict[str, str]:
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        if self.basic:
            raw = f"{self.basic[0]}:{self.basic[1]}".encode()
            return {"Authorization": f"Basic {base64.b64encode(raw).decode()}"}
        return {}


def load_yaml(text: str) -> Any:
    """The YAML document of a kubeconfig's text.

    Raises ``BadKubeconfig`` saying where it is not YAML, never what stands there (nor
    chained to the parser's error, which quotes it): a kubeconfig holds credentials.
    """
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise BadKubeconfig(f"the kubeconfig is not valid YAML{where}") from None


def parse(text: str, *, allow_exec: bool) -> tuple[SpokeCredentials, dict[str, Any]]:
    """Check a spoke kubeconfig; its credentials and the parsed document.

    Raises ``BadKubeconfig`` with a sentence that names the field, never its content.
    """
    doc = load_yaml(text)
    if not isinstance(doc, dict):
        raise BadKubeconfig("the kubeconfig is not a mapping of clusters, users and contexts")
    context = _current_context(doc)
    cluster = _named(doc, "clusters", "cluster", context.get("cluster"))
    user = _named(doc, "users", "user", context.get("user")) if context.get("user") else {}
    for section, body in (("cluster", cluster), ("user", user)):
        for key in body:
            if key in _REFUSED:
                raise BadKubeconfig(f"the kubeconfig's {section} {_REFUSED[key]}")
            allowed = _CLUSTER_KEYS if section == "cluster" else _USER_KEYS
            if key not in allowed:
                raise BadKubeconfig(f"the kubeconfig's {section} sets {key}, which mcad does "
                                    "not use; remove it")
    server = str(cluster.get("server") or "")
    if not server.startswith(("https://", "http://")):
        raise BadKubeconfig("the kubeconfig's cluster has no http(s) server address")
    if "exec" in user and not allow_exec:
        raise BadKubeconfig("the kubeconfig's user runs an exec credential plugin, which mcad "
                            "does not run from a Secret unless allowExecCredentials is true "
                            "in its configuration; use a token or a client certificate")
    token = user.get("token")
    if token is not None:
        token = str(token).strip()
        _check_expiry(token)
    credentials = _credentials(
        server, cluster, user, token=token, cert=_pem(user, "client-certificate-data"),
        key=_pem(user, "client-key-data"), ca=_pem(cluster, "certificate-authority-data"),
        pair="client-certificate-data and client-key-data", exec_plugin="exec" in user)
    return credentials, doc


def _credentials(server: str, cluster: Mapping[str, Any], user: Mapping[str, Any], *,
                 token: str | None, cert: bytes | None, key: bytes | None,
                 ca: bytes | None, pair: str, exec_plugin: bool) -> SpokeCredentials:
    """Credentials from a kubeconfig's cluster and user, their certificate material
    already read (inline, or from files for a trusted one); ``pair`` names the client
    certificate and key as that kubeconfig gives them, for the sentence."""
    if bool(cert) != bool(key):
        raise BadKubeconfig(f"the kubeconfig's user needs both {pair}, or neither")
    basic = None
    if user.get("username") is not None or user.get("password") is not None:
        basic = (str(user.get("username") or ""), str(user.get("password") or ""))
    return SpokeCredentials(
        server=server.rstrip("/"), ca_pem=ca.decode(errors="replace") if ca else None,
        verify=not cluster.get("insecure-skip-tls-verify"), token=token,
        client_cert_pem=cert, client_key_pem=key, basic=basic, exec_plugin=exec_plugin)


_TRUSTED_CLUSTER_KEYS = _CLUSTER_KEYS | {"certificate-authority"}
_TRUSTED_USER_KEYS = (_USER_KEYS - {"exec"}) | {"client-certificate", "client-key", "tokenFile"}


def parse_trusted(doc: Mapping[str, Any], *, context: str | None = None,
                  base: Path | None = None) -> SpokeCredentials | None:
    """Credentials from the operator's own kubeconfig (the hub's, or a CLI user's), read
    without kubernetes_asyncio; None when it needs that loader (an exec plugin, an
    auth-provider, or a field this reader does not know, such as proxy-url).

    Why a reader of its own: kubernetes_asyncio's loader imports the package's every API
    model, 36 MB of the controller's resident memory that nothing else uses (requests go
    through mcad's own transport). Unlike a spoke's kubeconfig this one is trusted, so its
    files are read: ``certificate-authority``, ``client-certificate``, ``client-key`` and
    ``tokenFile``, relative to ``base`` (the kubeconfig's directory) as kubectl reads them.
    """
    ctx = _current_context(doc, context)
    cluster = _named(doc, "clusters", "cluster", ctx.get("cluster"))
    user = _named(doc, "users", "user", ctx.get("user")) if ctx.get("user") else {}
    if set(cluster) - _TRUSTED_CLUSTER_KEYS or set(user) - _TRUSTED_USER_KEYS:
        return None
    server = str(cluster.get("server") or "")
    if not server.startswith(("https://", "http://")):
        raise BadKubeconfig(f"the kubeconfig's server {server!r} is not an http(s) URL")

    files: list[str] = []

    def data(body: Mapping[str, Any], key: str) -> bytes | None:
        inline = _pem(body, f"{key}-data")
        if inline is not None or not body.get(key):
            return inline
        files.append(f"{key} {body[key]}")
        return _read(base, str(body[key]), key)

    token = user.get("token")
    if token is None and user.get("tokenFile"):
        token = _read(base, str(user["tokenFile"]), "tokenFile").decode()
    credentials = _credentials(
        server, cluster, user, token=str(token).strip() if token is not None else None,
        cert=data(user, "client-certificate"), key=data(user, "client-key"),
        ca=data(cluster, "certificate-authority"),
        pair="a client certificate and a client key", exec_plugin=False)
    if files:  # name the files: the checks' own sentences speak of the -data fields
        try:
            credentials.ssl_context()
        except BadKubeconfig as err:
            raise BadKubeconfig(f"the kubeconfig's {', '.join(files)}: not a valid PEM "
                                "certificate (and key)") from err
    return credentials


def _read(base: Path | None, name: str, key: str) -> bytes:
    path = Path(name).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    try:
        return path.read_bytes()
    except OSError as err:
        raise BadKubeconfig(f"the kubeconfig's {key} {path} cannot be read: "
                            f"{err.strerror}") from err


def _current_context(doc: Mapping[str, Any], chosen: str | None = None) -> dict[str, Any]:
    contexts = doc.get("contexts") or []
    if not isinstance(contexts, list) or not contexts:
        clusters = doc.get("clusters") or []
        users = doc.get("users") or []
        if isinstance(clusters, list) and len(clusters) == 1:
            first_user = users[0].get("name") if isinstance(users, list) and users and \
                isinstance(users[0], dict) else None
            return {"cluster": clusters[0].get("name") if isinstance(clusters[0], dict)
                    else None, "user": first_user}
        raise BadKubeconfig("the kubeconfig has no contexts")
    wanted = chosen or doc.get("current-context")
    for entry in contexts:
        if isinstance(entry, dict) and (not wanted or entry.get("name") == wanted):
            body = entry.get("context")
            if not isinstance(body, dict):
                raise BadKubeconfig("the kubeconfig's current context has no cluster")
            return body
    if chosen:
        raise BadKubeconfig(f"the kubeconfig has no context {chosen!r}")
    raise BadKubeconfig("the kubeconfig's current-context names no context it has")


def _named(doc: Mapping[str, Any], section: str, inner: str, name: Any) -> dict[str, Any]:
    entries = doc.get(section) or []
    if not isinstance(entries, list):
        raise BadKubeconfig(f"the kubeconfig's {section} is not a list")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(inner)
            if not isinstance(body, dict):
                raise BadKubeconfig(f"the kubeconfig's {inner} {name!r} is empty")
            return body
    raise BadKubeconfig(f"the kubeconfig's context names a {inner} it does not have")


def _pem(body: Mapping[str, Any], key: str) -> bytes | None:
    value = body.get(key)
    if value is None:
        return None
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError) as err:
        raise BadKubeconfig(f"the kubeconfig's {key} is not base64") from err


def _check_expiry(token: str) -> None:
    """Refuse a JWT whose ``exp`` has passed (other tokens cannot be judged)."""
    exp = token_expiry(token)
    if exp is not None and exp < time.time():
        expired = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(exp))
        raise BadKubeconfig(f"the kubeconfig's token expired at {expired}; register the "
                            "spoke again with a fresh one")


def token_expiry(token: str | None) -> float | None:
    """The ``exp`` of a JWT token (seconds since the epoch); None when it has none."""
    if not token:
        return None
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    return float(exp) if isinstance(exp, int | float) else None

"""A private CA and the webhook's serving certificate, made and judged here.

Why mcad makes its own (as Kueue's internal certificate management does): a webhook
must serve TLS that the API server trusts, and a platform should not need cert-manager
to install mcad. The CA lives ten years, the serving certificate one; the certificate
is renewed when a month is left or when the names it must carry changed, and the CA
when a year is left (then the serving certificate too). Keys are ECDSA P-256.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
CERT_DAYS = 365
RENEW_CERT_BEFORE = dt.timedelta(days=30)
RENEW_CA_BEFORE = dt.timedelta(days=365)


@dataclass(frozen=True)
class CertBundle:
    """PEM text of the CA certificate, the CA key, the serving certificate and its key."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def new_ca(now: dt.datetime) -> tuple[bytes, bytes]:
    """A fresh self-signed CA: (certificate PEM, key PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(_name("mcad-webhook-ca")).issuer_name(_name("mcad-webhook-ca"))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def new_serving_cert(ca_cert: bytes, ca_key: bytes, hosts: Sequence[str],
                     now: dt.datetime) -> tuple[bytes, bytes]:
    """A serving certificate for ``hosts`` (DNS names or IP addresses), signed by the CA."""
    ca = x509.load_pem_x509_certificate(ca_cert)
    signer = serialization.load_pem_private_key(ca_key, password=None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (x509.CertificateBuilder()
            .subject_name(_name(hosts[0] if hosts else "mcad-webhook"))
            .issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(min(now + dt.timedelta(days=CERT_DAYS), ca.not_valid_after_utc))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(signer, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def issue(hosts: Sequence[str], now: dt.datetime, current: CertBundle | None = None
          ) -> CertBundle | None:
    """The bundle to serve with: ``current`` when it is still good for ``hosts``, a new
    serving certificate (from the same CA) when it is due, or a new CA and certificate.
    Returns None when ``current`` needs no change."""
    if current is not None and _valid_ca(current, now):
        if _serves(current.cert, hosts, now):
            return None
        cert, key = new_serving_cert(current.ca_cert, current.ca_key, hosts, now)
        return CertBundle(current.ca_cert, current.ca_key, cert, key)
    ca_cert, ca_key = new_ca(now)
    cert, key = new_serving_cert(ca_cert, ca_key, hosts, now)
    return CertBundle(ca_cert, ca_key, cert, key)


def _valid_ca(bundle: CertBundle, now: dt.datetime) -> bool:
    try:
        ca = x509.load_pem_x509_certificate(bundle.ca_cert)
        serialization.load_pem_private_key(bundle.ca_key, password=None)
    except ValueError:
        return False
    return ca.not_valid_after_utc - now > RENEW_CA_BEFORE


def _serves(cert_pem: bytes, hosts: Sequence[str], now: dt.datetime) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    have = {str(n) for n in names.get_values_for_type(x509.DNSName)} | \
        {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    return set(hosts) <= have and cert.not_valid_after_utc - now > RENEW_CERT_BEFORE


def expires(cert_pem: bytes) -> dt.datetime:
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc

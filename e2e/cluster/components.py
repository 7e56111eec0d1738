"""Command lines of the test bed's components.

Every flag that is not a default is here for a reason on a loopback-only machine:
``--advertise-address`` because there may be no default route,
``--endpoint-reconciler-type=none`` because nothing reaches the apiserver through
the kubernetes Service, the ServiceAccount admission plugin off so pods can be
created in a namespace before its default ServiceAccount exists, secure ports of
the controller-manager and scheduler off (nothing scrapes them), leader election
off (one replica each), etcd without fsync (a throw-away lab store), and no node
Leases, with an hour's grace before a quiet node is taken for dead (see ``stages``).
"""

from __future__ import annotations

import os
from pathlib import Path

from e2e.cluster.build import Artifacts
from e2e.cluster.pki import Credentials

SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.64.0.0/12"


def etcd(art: Artifacts, *, data_dir: Path, port: int, peer_port: int) -> list[str]:
    return [
        str(art.path("etcd")), "--name", "testbed", "--data-dir", str(data_dir),
        "--listen-client-urls", f"http://127.0.0.1:{port}",
        "--advertise-client-urls", f"http://127.0.0.1:{port}",
        "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
        "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
        "--initial-cluster", f"testbed=http://127.0.0.1:{peer_port}",
        "--unsafe-no-fsync", "--log-level", "warn", "--quota-backend-bytes", str(4 * 2**30),
    ]


PROFILING_ENV = "MCAD_TESTBED_PROFILING"
"""Set to 1 in a test bed's environment to serve /debug/pprof from its API servers."""


def apiserver(art: Artifacts, *, port: int, etcd_port: int, prefix: str,
              creds: Credentials) -> list[str]:
    return [
        str(art.path("kube-apiserver")),
        f"--etcd-servers=http://127.0.0.1:{etcd_port}", f"--etcd-prefix={prefix}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
        f"--tls-cert-file={creds.serving_cert}", f"--tls-private-key-file={creds.serving_key}",
        f"--client-ca-file={creds.ca_cert}",
        f"--token-auth-file={creds.token_file}", "--authorization-mode=RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={creds.sa_pub}",
        f"--service-account-signing-key-file={creds.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--endpoint-reconciler-type=none", "--allow-privileged=true",
        "--disable-admission-plugins=ServiceAccount",
        "--enable-priority-and-fairness=false",
        # Off, as the test bed has no use for it; PROFILING_ENV=1 turns Go's
        # /debug/pprof on, to see where an API server's CPU goes under a benchmark.
        f"--profiling={'true' if os.environ.get(PROFILING_ENV) == '1' else 'false'}",
        "--max-requests-inflight=1000", "--max-mutating-requests-inflight=500",
        *_aggregation(creds),
        "--v=1",
    ]


def _aggregation(creds: Credentials) -> list[str]:
    """The aggregation layer's flags, as kubeadm sets them: the API server proxies an
    APIService's requests with the front-proxy client certificate and the caller in
    X-Remote-* headers, and publishes the CA and header names in
    kube-system/extension-apiserver-authentication for the aggregated server to check."""
    if creds.front_proxy_ca is None or creds.front_proxy_cert is None \
            or creds.front_proxy_key is None:
        return []
    return [f"--requestheader-client-ca-file={creds.front_proxy_ca}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-uid-headers=X-Remote-Uid",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={creds.front_proxy_cert}",
            f"--proxy-client-key-file={creds.front_proxy_key}"]


def controller_manager(art: Artifacts, *, kubeconfig: Path, creds: Credentials) -> list[str]:
    return [
        str(art.path("kube-controller-manager")), f"--kubeconfig={kubeconfig}",
        "--secure-port=0", "--leader-elect=false",
        f"--service-account-private-key-file={creds.sa_key}",
        f"--root-ca-file={creds.ca_cert}", "--use-service-account-credentials=false",
        f"--cluster-cidr={POD_CIDR}", f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--kube-api-qps=200", "--kube-api-burst=400",
        "--concurrent-job-syncs=20", "--concurrent-gc-syncs=40",
        # KWOK nodes send no Leases and a status heartbeat every 10 to 30 minutes
        # (``stages``): the node lifecycle controller waits an hour before it takes a
        # quiet node for a dead one. It stays on, since it is what removes the
        # not-ready taint the API server puts on every new node.
        "--node-monitor-grace-period=1h",
        "--v=1",
    ]


SCHEDULER_CONFIG = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: {kubeconfig}
  qps: 200
  burst: 400
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: Coscheduling
      disabled:
      - name: PrioritySort
  pluginConfig:
  - name: Coscheduling
    args:
      permitWaitingTimeSeconds: {permit_seconds}
"""

PERMIT_WAITING_SECONDS = 10


def scheduler(art: Artifacts, *, config: Path) -> list[str]:
    return [str(art.path("kube-scheduler")), f"--config={config}", "--secure-port=0", "--v=1"]


def kwok(art: Artifacts, *, kubeconfig: Path, stages: Path) -> list[str]:
    return [
        str(art.path("kwok")), f"--kubeconfig={kubeconfig}", f"--config={stages}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--node-lease-duration-seconds=0", f"--cidr={POD_CIDR}", "--node-ip=127.0.0.1",
        "--v=WARN",
    ]

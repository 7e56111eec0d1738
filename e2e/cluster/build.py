"""Build (or reuse) the test bed's binaries from the Go module proxy.

The binaries are built from the Go modules in ``e2e/controlplane`` with the local
Go toolchain (GOTOOLCHAIN=local) and kept in a cache folder outside the work tree,
keyed by a hash of the module files and the Go version, so a fresh clone on the
same machine reuses them and an edit to versions.env rebuilds them. Go's own build
cache makes a rebuild after a small change incremental. Nothing built is committed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CONTROLPLANE = Path(__file__).resolve().parent.parent / "controlplane"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl",
            "etcd", "kwok")
PODGROUP_CRD = "podgroup-crd.yaml"


class BuildError(Exception):
    """The build cannot go on; the message is one line saying what is missing."""


@dataclass(frozen=True)
class Artifacts:
    """Where the built binaries and data files of one cache key live."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    def path(self, name: str) -> Path:
        return self.bin / name

    @property
    def podgroup_crd(self) -> Path:
        return self.root / PODGROUP_CRD

    def complete(self) -> bool:
        return all(self.path(b).is_file() for b in BINARIES) and self.podgroup_crd.is_file() \
            and (self.root / "build.json").is_file()


def versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in (CONTROLPLANE / "versions.env").read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def go_env() -> dict[str, str]:
    return {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0",
            "GOFLAGS": "-mod=mod"}


def go_version() -> str:
    if shutil.which("go") is None:
        raise BuildError("the Go toolchain is missing: install Go >= 1.24 and put `go` on PATH")
    out = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True,
                         env=go_env(), check=False)
    if out.returncode != 0:
        raise BuildError(f"`go env GOVERSION` failed: {out.stderr.strip().splitlines()[-1:]}")
    return out.stdout.strip()


def cache_root() -> Path:
    base = os.environ.get("MCAD_TESTBED_CACHE")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "mcad-testbed"


def cache_key(gover: str) -> str:
    digest = hashlib.sha256(gover.encode())
    for path in sorted(CONTROLPLANE.rglob("*")):
        if path.is_file() and path.suffix in (".mod", ".sum", ".go", ".env"):
            digest.update(str(path.relative_to(CONTROLPLANE)).encode())
            digest.update(path.read_bytes())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()[:16]


def artifacts() -> Artifacts:
    """The artifacts for the current sources, built or not."""
    return Artifacts(cache_root() / cache_key(go_version()))


def _commit_of(module: str, version: str) -> str:
    """The upstream commit of a module version, from the proxy's .info (best effort)."""
    proxy = os.environ.get("GOPROXY", "https://proxy.golang.org").split(",")[0]
    if proxy in ("direct", "off"):
        proxy = "https://proxy.golang.org"
    try:
        with urllib.request.urlopen(f"{proxy}/{module}/@v/{version}.info", timeout=30) as r:
            info = json.loads(r.read())
        return str(info.get("Origin", {}).get("Hash", "")) or "unknown"
    except (OSError, ValueError):
        return "unknown"


def _kube_ldflags(version: str) -> str:
    major, minor = version.removeprefix("v").split(".")[:2]
    commit = _commit_of("k8s.io/kubernetes", version)
    fields = {"gitVersion": version, "gitMajor": major, "gitMinor": minor,
              "gitCommit": commit, "gitTreeState": "clean",
              "buildDate": "1970-01-01T00:00:00Z"}
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.{k}={v}" for k, v in fields.items()]
    return "-s -w " + " ".join(flags)


HEARTBEAT_S = 30.0
"""How often a long ``go build`` says it is still at work."""


def _go(args: list[str], cwd: Path, log: Callable[[str], object], *, what: str = "") -> None:
    """Run ``go args`` in ``cwd``; ``what`` (a component) gets a line when it starts,
    one every HEARTBEAT_S while it builds, and one with the time it took."""
    started = time.monotonic()
    if what:
        log(f"  building {what} ...")
    else:
        log(f"  $ go {' '.join(args[:6])}{' ...' if len(args) > 6 else ''}  (in {cwd.name}/)")
    with tempfile.TemporaryFile("w+") as errors:
        proc = subprocess.Popen(["go", *args], cwd=cwd, env=go_env(),
                                stdout=subprocess.DEVNULL, stderr=errors, text=True)
        while True:
            try:
                proc.wait(timeout=HEARTBEAT_S)
                break
            except subprocess.TimeoutExpired:
                log(f"    still building {what or cwd.name} "
                    f"({_elapsed(time.monotonic() - started)})")
        errors.seek(0)
        stderr = errors.read()
    if proc.returncode != 0:
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        tail = "\n".join(lines[-15:])
        if any(s in stderr for s in ("dial tcp", "403 Forbidden", "404 Not Found",
                                     "no such host", "connection refused", "timeout")):
            raise BuildError("a Go module download failed (is the module proxy reachable?):\n"
                             + tail)
        raise BuildError(f"`go {' '.join(args[:3])}` failed in {cwd}:\n{tail}")
    if what:
        log(f"  built {what} in {_elapsed(time.monotonic() - started)}")


def _elapsed(seconds: float) -> str:
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


def _tools(module: Path) -> list[str]:
    """The packages of a go.mod's ``tool`` block, in order."""
    text = (module / "go.mod").read_text()
    block = text.split("tool (", 1)[1].split(")", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip()]


def build(*, force: bool = False, log: Callable[[str], object] = print) -> Artifacts:
    """Build every binary unless the cache for the current sources is complete."""
    art = artifacts()
    if art.complete() and not force:
        return art
    v = versions()
    tmp = art.root.with_name(art.root.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "bin").mkdir(parents=True)
    started = time.monotonic()
    log(f"building the test bed binaries into {art.root} (first time: many minutes)")
    kube = CONTROLPLANE / "kube"
    # One component at a time (they share Go's build cache, so the later ones are
    # quicker), so a first build says what it is doing rather than nine silent minutes.
    tools = _tools(kube)
    for number, package in enumerate(tools, start=1):
        name = package.rsplit("/", 1)[1]
        _go(["build", "-trimpath", "-ldflags", _kube_ldflags(v["KUBERNETES_VERSION"]),
             "-o", str(tmp / "bin" / name), package], kube, log,
            what=f"{name} ({number} of {len(tools) + 2})")
    _go(["build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp / "bin" / "etcd"),
         "go.etcd.io/etcd/server/v3"], CONTROLPLANE / "etcd", log,
        what=f"etcd ({len(tools) + 1} of {len(tools) + 2})")
    kwok_ldflags = (f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version={v['KWOK_VERSION']}"
                    f" -X sigs.k8s.io/kwok/pkg/consts.KubeVersion={v['KUBERNETES_VERSION']}")
    _go(["build", "-trimpath", "-ldflags", kwok_ldflags, "-o", str(tmp / "bin" / "kwok"),
         "sigs.k8s.io/kwok/cmd/kwok"], CONTROLPLANE / "kwok", log,
        what=f"kwok ({len(tools) + 2} of {len(tools) + 2})")
    # The PodGroup CRD ships with scheduler-plugins; copy it from the module cache.
    proc = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/scheduler-plugins"],
                          cwd=kube, env=go_env(), capture_output=True, text=True, check=False)
    plugin_dir = Path(proc.stdout.strip())
    crds = [*plugin_dir.glob("config/crd/bases/scheduling.x-k8s.io_podgroups.yaml"),
            *plugin_dir.glob("manifests/crds/scheduling.x-k8s.io_podgroups.yaml")]
    if proc.returncode != 0 or not crds:
        raise BuildError("the PodGroup CRD was not found in the scheduler-plugins module "
                         f"({plugin_dir})")
    shutil.copyfile(crds[0], tmp / PODGROUP_CRD)
    elapsed = time.monotonic() - started
    (tmp / "build.json").write_text(json.dumps({"seconds": round(elapsed, 1), **v}, indent=1))
    shutil.rmtree(art.root, ignore_errors=True)
    tmp.rename(art.root)
    log(f"built the test bed binaries in {_elapsed(elapsed)}")
    return art


def main() -> None:
    try:
        art = build(force="--force" in sys.argv)
    except BuildError as err:
        print(f"test bed build: {err}", file=sys.stderr)
        sys.exit(2)
    print(art.bin)


if __name__ == "__main__":
    main()

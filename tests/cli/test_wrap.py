"""``mcad wrap``: each of the five kinds becomes an AppWrapper whose custompodresources
declare the pods of its templates (replicas x one pod's requests) and that ``mcad
validate`` accepts with that demand; flags become priority, quota labels, name and
namespace; what cannot be wrapped is one sentence (exit 1); ``--apply`` creates it on the
hub chosen by ``--kubeconfig`` and ``--context``. Running it on the test bed is in e2e/."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from mcad.cli import validate
from mcad.cli.main import main
from mcad.config import RunConfig
from mcad.core.workload.resources import ResourceList
from mcad.validation import check_appwrapper

GPU = "nvidia.com/gpu"


# -- builders --------------------------------------------------------------------------------

def container(name: str = "main", *, limits: dict[str, str] | None = None,
              **requests: str) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {GPU if k == "nvidia_com_gpu" else k: v
                                              for k, v in requests.items()}}
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "registry.example/trainer:1", "resources": resources}


def template(*containers: dict[str, Any], restart: str = "Never") -> dict[str, Any]:
    return {"spec": {"restartPolicy": restart, "containers": list(containers)}}


def job(name: str = "train", *, pods: int = 3) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": pods, "completions": pods, "template": template(
                container(cpu="2", memory="8Gi", nvidia_com_gpu="1",
                          limits={GPU: "1"}))}}


def pytorchjob() -> dict[str, Any]:
    worker = template(container("pytorch", cpu="4", memory="16Gi", nvidia_com_gpu="2",
                                limits={GPU: "2"}), restart="OnFailure")
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "ddp"},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": worker},
                "Worker": {"replicas": 3, "restartPolicy": "OnFailure", "template": worker}}}}


def jobset() -> dict[str, Any]:
    def replicated(name: str, replicas: int, pods: int, main: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "replicas": replicas, "template": {"spec": {
            "parallelism": pods, "completions": pods, "backoffLimit": 0,
            "template": template(main)}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "pretrain"},
            "spec": {"replicatedJobs": [
                replicated("leader", 1, 1, container(cpu="1", memory="2Gi")),
                replicated("workers", 2, 4, container(cpu="8", memory="64Gi",
                                                      nvidia_com_gpu="8"))]}}


def raycluster() -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "ray"},
            "spec": {"headGroupSpec": {"rayStartParams": {},
                                       "template": template(container("ray-head", cpu="2",
                                                                      memory="8Gi"),
                                                            restart="Always")},
                     "workerGroupSpecs": [{
                         "groupName": "gpu", "replicas": 2, "minReplicas": 0,
                         "maxReplicas": 4, "rayStartParams": {},
                         "template": template(container("ray-worker", cpu="4",
                                                        memory="32Gi", nvidia_com_gpu="1"),
                                              restart="Always")}]}}


def deployment() -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "serve"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "serve"}},
                     "template": {"metadata": {"labels": {"app": "serve"}},
                                  **template(container(cpu="1", memory="4Gi",
                                                       nvidia_com_gpu="1",
                                                       limits={GPU: "1"}),
                                             restart="Always")}}}


@dataclass(frozen=True)
class Case:
    manifest: dict[str, Any]
    want_shapes: list[tuple[int, dict[str, str]]]
    """(replicas, one pod's requests) per pod template, in the object's order."""
    want_total: ResourceList
    want_pods: int


CASES = {
    "Job": Case(job(), [(3, {"cpu": "2", "memory": "8Gi", GPU: "1"})],
                ResourceList.of(cpu=6, memory="24Gi", nvidia_com_gpu=3), 3),
    "PyTorchJob": Case(pytorchjob(), [(1, {"cpu": "4", "memory": "16Gi", GPU: "2"}),
                                      (3, {"cpu": "4", "memory": "16Gi", GPU: "2"})],
                       ResourceList.of(cpu=16, memory="64Gi", nvidia_com_gpu=8), 4),
    "JobSet": Case(jobset(), [(1, {"cpu": "1", "memory": "2Gi"}),
                              (8, {"cpu": "8", "memory": "64Gi", GPU: "8"})],
                   ResourceList.of(cpu=65, memory="514Gi", nvidia_com_gpu=64), 9),
    "RayCluster": Case(raycluster(), [(1, {"cpu": "2", "memory": "8Gi"}),
                                      (2, {"cpu": "4", "memory": "32Gi", GPU: "1"})],
                       ResourceList.of(cpu=10, memory="72Gi", nvidia_com_gpu=2), 3),
    "Deployment": Case(deployment(), [(2, {"cpu": "1", "memory": "4Gi", GPU: "1"})],
                       ResourceList.of(cpu=2, memory="8Gi", nvidia_com_gpu=2), 2),
}


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def manifest_file(tmp_path: Path, obj: Any, name: str = "workload.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(obj) if isinstance(obj, list) else yaml.safe_dump(obj))
    return path


def wrapped(tmp_path: Path, obj: dict[str, Any], capsys: pytest.CaptureFixture[str],
            *flags: str) -> dict[str, Any]:
    code, out, err = run(["wrap", "-f", str(manifest_file(tmp_path, obj)), *flags], capsys)
    assert (code, err) == (0, "")
    result = yaml.safe_load(out)
    assert isinstance(result, dict)
    return result


# -- the five kinds --------------------------------------------------------------------------

@pytest.mark.parametrize("kind", CASES)
def test_each_kind_declares_its_pods_and_passes_validation(
        kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = CASES[kind]
    aw = wrapped(tmp_path, case.manifest, capsys)
    item = aw["spec"]["resources"]["GenericItems"][0]
    assert item["generictemplate"]["kind"] == kind
    assert [(e["replicas"], e["requests"]) for e in item["custompodresources"]] \
        == case.want_shapes
    checked = check_appwrapper(aw, config=RunConfig(), namespace="default")
    assert checked.problems == []
    assert checked.demand is not None
    assert (checked.demand.pods, checked.demand.total) == (case.want_pods, case.want_total)
    assert checked.demand.raised == ()  # the declaration is exactly what the pods request
    report = validate.validate([str(manifest_file(tmp_path, aw, "aw.yaml"))])
    assert report.problems == []
    assert report.summaries == [
        f'{tmp_path / "aw.yaml"}: AppWrapper "{aw["metadata"]["name"]}": {case.want_pods} '
        f"pods (all in one gang), priority 0, requests {case.want_total.describe()}"]


def test_limits_are_declared_where_every_container_sets_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    obj = job(pods=1)
    containers = obj["spec"]["template"]["spec"]["containers"]
    containers.append(container("sidecar", cpu="500m", limits={"cpu": "1", GPU: "1"}))
    containers[0]["resources"]["limits"]["cpu"] = "4"
    entry = wrapped(tmp_path, obj, capsys)["spec"]["resources"]["GenericItems"][0][
        "custompodresources"][0]
    assert entry == {"replicas": 1,
                     "requests": {"cpu": "2500m", "memory": "8Gi", GPU: "2"},
                     "limits": {"cpu": "5", GPU: "2"}}


@pytest.mark.parametrize("kind", CASES)
def test_each_kind_wraps_as_v1beta2_with_its_inferred_podsets(
        kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--api v1beta2: one component, its podSets as the AppWrapper project infers them
    (so its admission and mcad's accept them), the same demand as v1beta1's."""
    case = CASES[kind]
    aw = wrapped(tmp_path, case.manifest, capsys, "--api", "v1beta2", "--queue", "q",
                 "--priority-class", "high")
    assert aw["apiVersion"] == "workload.codeflare.dev/v1beta2"
    assert aw["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "q",
                                        "kueue.x-k8s.io/priority-class": "high"}
    (component,) = aw["spec"]["components"]
    assert component["template"]["kind"] == kind
    assert [p["replicas"] for p in component["podSets"]] == [n for n, _ in case.want_shapes]
    checked = check_appwrapper(aw, config=RunConfig(), namespace="default")
    assert checked.problems == []
    assert checked.demand is not None
    assert (checked.demand.pods, checked.demand.total) == (case.want_pods, case.want_total)


def test_a_v1beta2_wrap_names_its_priority_by_class(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["wrap", "-f", str(manifest_file(tmp_path, job())), "--api", "v1beta2",
                        "--priority", "5"], capsys)
    assert code == 1 and "--priority-class" in err


# -- flags -----------------------------------------------------------------------------------

def test_priority_quota_name_and_namespace_come_from_the_flags(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    aw = wrapped(tmp_path, job(), capsys, "--priority", "7", "--quota",
                 "quota_context=team-a", "--quota", "example.com/site=west", "--name",
                 "train-7", "-n", "team-a")
    assert aw["metadata"] == {"name": "train-7", "namespace": "team-a", "labels": {
        "quota_context": "team-a", "example.com/site": "west"}}
    assert aw["spec"]["priority"] == 7
    template = aw["spec"]["resources"]["GenericItems"][0]["generictemplate"]
    assert template["metadata"] == {"name": "train", "namespace": "team-a"}


def test_what_the_api_server_wrote_is_dropped(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    obj = job()
    obj["metadata"].update(namespace="team-b", uid="5f0c", resourceVersion="812",
                           creationTimestamp="2025-01-01T00:00:00Z", generation=1,
                           managedFields=[{"manager": "kubectl"}], labels={"app": "t"})
    obj["status"] = {"active": 3}
    aw = wrapped(tmp_path, obj, capsys)
    template = aw["spec"]["resources"]["GenericItems"][0]["generictemplate"]
    assert template["metadata"] == {"name": "train", "namespace": "team-b",
                                    "labels": {"app": "t"}}
    assert "status" not in template
    assert aw["metadata"]["namespace"] == "team-b"


def test_the_manifest_may_come_from_stdin(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(deployment())))
    code, out, _ = run(["wrap", "-f", "-"], capsys)
    assert code == 0
    assert yaml.safe_load(out)["metadata"] == {"name": "serve", "namespace": "default"}


@pytest.mark.parametrize("flag", ["team-a", "=team-a", "quota_context=", "bad key=x",
                                  "quota_context=not/a/value"])
def test_a_malformed_quota_flag_is_a_usage_error(
        flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["wrap", "-f", str(manifest_file(tmp_path, job())), "--quota", flag],
                         capsys)
    assert (code, out) == (2, "")
    assert "--quota" in err and "Traceback" not in err


# -- what cannot be wrapped ------------------------------------------------------------------

@pytest.mark.parametrize(("obj", "sentence"), [
    ({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"}},
     "mcad wrap: StatefulSet (apps/v1) cannot be wrapped by mcad wrap; it wraps Job "
     "(batch/v1), PyTorchJob (kubeflow.org/v1), JobSet (jobset.x-k8s.io/v1alpha2), "
     "RayCluster (ray.io/v1), Deployment (apps/v1).\n"),
    ({**job(), "metadata": {}},
     "mcad wrap: the Job has no metadata.name; give the AppWrapper one with --name.\n"),
    ({**job(), "metadata": {"name": "train", "namespace": "team-b"}},
     "mcad wrap: the Job says namespace team-b but -n says team-a; drop one of them.\n"),
])
def test_what_cannot_be_wrapped_is_one_sentence(
        obj: dict[str, Any], sentence: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["wrap", "-f", str(manifest_file(tmp_path, obj)), "-n", "team-a"],
                         capsys)
    assert (code, out, err) == (1, "", sentence)


def test_a_bad_quantity_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    obj = job()
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "two"
    code, out, err = run(["wrap", "-f", str(manifest_file(tmp_path, obj))], capsys)
    assert (code, out) == (1, "")
    assert err.startswith("mcad wrap: spec.template: ")
    assert "containers[0].resources.requests.cpu" in err


def test_one_workload_per_wrap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = manifest_file(tmp_path, [job("a"), job("b")])
    code, out, err = run(["wrap", "-f", str(path)], capsys)
    assert (code, out) == (1, "")
    assert err == f"mcad wrap: {path} holds 2 objects; give one workload per mcad wrap.\n"


# -- --apply ---------------------------------------------------------------------------------

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- {name: elsewhere, cluster: {server: "http://127.0.0.1:1"}}
- {name: hub, cluster: {server: "SERVER"}}
users:
- {name: admin, user: {token: abc}}
contexts:
- {name: elsewhere, context: {cluster: elsewhere, user: admin}}
- {name: hub, context: {cluster: hub, user: admin}}
current-context: elsewhere
"""


@dataclass
class FakeHub:
    url: str
    created: list[tuple[str, dict[str, Any]]]


@pytest.fixture
async def fake_hub() -> AsyncIterator[FakeHub]:
    """An API server that creates AppWrappers once per name (then 409 AlreadyExists)."""
    created: list[tuple[str, dict[str, Any]]] = []

    async def create(request: web.Request) -> web.Response:
        body = await request.json()
        if any(b["metadata"]["name"] == body["metadata"]["name"] for _, b in created):
            return web.json_response({"kind": "Status", "reason": "AlreadyExists",
                                      "message": "already exists", "code": 409}, status=409)
        created.append((request.path, body))
        return web.json_response(body, status=201)

    app = web.Application()
    app.router.add_post("/apis/workload.codeflare.dev/v1beta1/namespaces/{ns}/appwrappers",
                        create)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield FakeHub(f"http://127.0.0.1:{runner.addresses[0][1]}", created)
    await runner.cleanup()


async def test_apply_creates_it_on_the_hub_of_the_context_given(
        tmp_path: Path, fake_hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG.replace("SERVER", fake_hub.url))
    args = ["wrap", "-f", str(manifest_file(tmp_path, job())), "-n", "team-a", "--apply",
            "--kubeconfig", str(kubeconfig), "--context", "hub"]
    code = await asyncio.to_thread(main, args)
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out == "appwrapper.workload.codeflare.dev/train created in team-a\n"
    [(path, body)] = fake_hub.created
    assert path == "/apis/workload.codeflare.dev/v1beta1/namespaces/team-a/appwrappers"
    assert json.loads(json.dumps(body))["spec"]["resources"]["GenericItems"][0][
        "custompodresources"] == [{"replicas": 3, "requests": {
            "cpu": "2", "memory": "8Gi", GPU: "1"}, "limits": {GPU: "1"}}]

    code = await asyncio.to_thread(main, args)
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err == ("mcad wrap: an AppWrapper team-a/train exists already; delete it, or "
                   "choose another --name.\n")

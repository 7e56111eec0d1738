"""``mcad validate``: exit codes, one summary line per valid object, one sentence per
problem naming file, object and field, stdin and directories, and never a traceback."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mcad.cli import main as cli_main
from mcad.cli import validate as validate_cmd
from mcad.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
INVALID = sorted((FIXTURES / "invalid").glob("*.yaml"))


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_valid_objects_get_one_summary_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["validate", "-f", str(FIXTURES / "mcad-v1" / "quota-tree.yaml"),
                          "-f", str(ROOT / "examples" / "train-32gpu-gang.yaml")], capsys)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == 3
    assert lines[0].endswith('quota-tree.yaml (document 1): QuotaSubtree "context-root": '
                             "tree quota_context, the root: context-root (cpu 2, memory "
                             "8000Mi, hard)")
    assert lines[2].endswith('train-32gpu-gang.yaml: AppWrapper "train-32gpu-gang": 4 pods '
                             "(all in one gang), priority 10, requests cpu 32, memory 256Gi, "
                             "nvidia.com/gpu 32")


def test_examples_are_all_valid(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["validate", "-f", str(ROOT / "examples")], capsys)
    assert (code, err) == (0, "")
    assert len(out.splitlines()) == 9


def test_example_pods_carry_the_test_bed_runtime() -> None:
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] != "AppWrapper":
                continue
            for item in doc["spec"]["resources"]["GenericItems"]:
                template = item["generictemplate"]
                if template["kind"] == "Pod":
                    annotations = template["metadata"]["annotations"]
                elif template["kind"] == "Job":
                    annotations = template["spec"]["template"]["metadata"]["annotations"]
                else:
                    continue
                assert annotations == {"mcad.test/runtime": "20s"}, path.name


MCAD_V1_FOREIGN_NAMESPACE = "aw-statefulset-legacy-fields.yaml"
"""MCAD's own YAML wraps a StatefulSet into namespace test1 from an AppWrapper in default:
MCAD created it there, mcad refuses (an AppWrapper may only create objects in its own
namespace, or it would be a way into namespaces its author may not write)."""


@pytest.mark.parametrize("path", sorted((FIXTURES / "mcad-v1").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_mcad_v1_fixtures_pass(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["validate", "-f", str(path)], capsys)
    if path.name == MCAD_V1_FOREIGN_NAMESPACE:
        assert code == 1
        assert "GenericItems[0] StatefulSet/mygangscheduledapp names namespace 'test1'; " \
               "an AppWrapper may only create objects in its own namespace ('default')" in err
        return
    assert code == 0
    assert all(line.startswith("note: ") and "not acted on" in line
               for line in err.splitlines()), err


def expectations(path: Path) -> list[str]:
    return [line.removeprefix("# expect: ").strip() for line in path.read_text().splitlines()
            if line.startswith("# expect: ")]


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_each_problem_is_one_sentence_naming_file_object_and_field(
        path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(path.parent)
    code, _, err = run(["validate", "-f", path.name], capsys)
    assert code == 1
    problems = [line for line in err.splitlines()
                if not line.startswith(("note:", "mcad validate:"))]
    wanted = expectations(path)
    assert wanted, f"{path.name} has no '# expect:' lines"
    assert len(problems) == len(wanted), problems
    for want, problem in zip(wanted, problems, strict=True):
        assert want in problem
        assert problem.startswith(path.name)
        assert problem.endswith(".")
        assert "\n" not in problem
    count = len(wanted)
    assert err.splitlines()[-1].startswith(
        f"mcad validate: {count} problem{'s' if count > 1 else ''} found in ")
    assert "Traceback" not in err


def test_stdin_with_many_documents(capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "examples" / "spoke-clusters.yaml").read_text()
    text += "---\n" + (FIXTURES / "invalid" / "bad-quantity.yaml").read_text()
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    code, out, err = run(["validate", "-f", "-"], capsys)
    assert code == 1
    assert out.splitlines() == [
        '<stdin> (document 1): SpokeCluster "hub": the hub itself (local), labels zone=west',
        '<stdin> (document 2): SpokeCluster "spoke-east": remote, kubeconfig in Secret '
        "spoke-east key kubeconfig, labels zone=east",
    ]
    assert err.startswith('<stdin> (document 3): AppWrapper "train": spec.resources.'
                          "GenericItems[0].custompodresources[0].requests.nvidia.com/gpu: "
                          '"eight" is not a quantity')


def test_a_list_is_opened_into_its_items(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "list.yaml").write_text(
        "apiVersion: v1\nkind: List\nitems:\n"
        "- {apiVersion: cluster.codeflare.dev/v1alpha1, kind: SpokeCluster,\n"
        "   metadata: {name: hub}, spec: {local: true}}\n"
        "- {apiVersion: cluster.codeflare.dev/v1alpha1, kind: SpokeCluster,\n"
        "   metadata: {name: bad}, spec: {}}\n")
    code, out, err = run(["validate", "-f", str(tmp_path / "list.yaml")], capsys)
    assert code == 1
    assert out.strip().endswith('list.yaml (items[0]): SpokeCluster "hub": the hub itself '
                                "(local), no labels")
    assert 'list.yaml (items[1]): SpokeCluster "bad": spec.local:' in err


def test_notes_point_at_misspelled_fields_without_failing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "examples" / "train-1gpu.yaml").read_text()
    text = text.replace("  priority: 1\n", "  priority: 1\n  schedulingSpec:\n"
                                            "    minAvaliable: 1\n")
    (tmp_path / "typo.yaml").write_text(text)
    code, out, err = run(["validate", "-f", str(tmp_path / "typo.yaml")], capsys)
    assert code == 0
    assert 'AppWrapper "train-1gpu": 1 pod' in out
    assert err.startswith("note: ")
    assert ("spec.schedulingSpec.minAvaliable: is not a field of AppWrapper; the API server "
            "will drop or reject it (check the spelling).") in err


@pytest.mark.parametrize(("setup", "want"), [
    ("missing", "missing.yaml: no such file or directory."),
    ("empty-dir", "empty: the directory holds no .yaml, .yml or .json files."),
    ("empty-file", "empty.yaml: holds no Kubernetes objects (the stream is empty)."),
    ("binary", "binary.yaml: the file is not UTF-8 text; is it a YAML manifest?"),
])
def test_unreadable_inputs_are_sentences(setup: str, want: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    target = {"missing": "missing.yaml", "empty-dir": "empty", "empty-file": "empty.yaml",
              "binary": "binary.yaml"}[setup]
    if setup == "empty-dir":
        (tmp_path / target).mkdir()
    elif setup == "empty-file":
        (tmp_path / target).write_text("---\n# nothing\n")
    elif setup == "binary":
        (tmp_path / target).write_bytes(b"\xff\xfe\x00bad")
    code, out, err = run(["validate", "-f", str(tmp_path / target)], capsys)
    assert (code, out) == (1, "")
    assert err.splitlines()[0] == f"{tmp_path / target}"[: -len(target)] + want


def test_the_command_line_itself(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "validate" in capsys.readouterr().err
    assert main(["validate"]) == 2  # -f is required
    assert "-f" in capsys.readouterr().err
    assert main(["--help"]) == 0
    assert "validate" in capsys.readouterr().out


def test_an_internal_error_is_a_sentence_not_a_traceback(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(validate_cmd, "validate", explode)
    code, _, err = run(["validate", "-f", "x.yaml"], capsys)
    assert code == cli_main.EXIT_INTERNAL
    assert err == ("mcad: internal error (RuntimeError: boom); this is a bug in mcad, please "
                   "report it together with the input that caused it.\n")
    assert "Traceback" not in err


def test_as_a_subprocess() -> None:
    bad = subprocess.run(
        [sys.executable, "-m", "mcad.cli", "validate", "-f", "malformed.yaml",
         "-f", "bad-quantity.yaml", "-f", "unknown-kind.yaml"],
        cwd=FIXTURES / "invalid", capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 1
    assert "Traceback" not in bad.stderr
    assert bad.stderr.splitlines()[0].startswith(
        "malformed.yaml: the YAML is malformed at line 9, column 3:")
    assert bad.stdout == 'unknown-kind.yaml (document 1): SpokeCluster "hub": the hub itself ' \
                         "(local), no labels\n"
    good = subprocess.run(
        [sys.executable, "-m", "mcad.cli", "validate", "-f", str(ROOT / "examples")],
        capture_output=True, text=True, timeout=60, check=False)
    assert (good.returncode, good.stderr) == (0, "")


def test_an_under_declared_custompodresources_shows_the_true_total(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 2 x 8-GPU Job declared as 1 GPU is charged (and shown as) 16 GPUs."""
    doc = {"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
           "metadata": {"name": "sly"},
           "spec": {"resources": {"GenericItems": [{
               "custompodresources": [{"replicas": 1, "requests": {"nvidia.com/gpu": "1"}}],
               "generictemplate": {
                   "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sly"},
                   "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
                       "restartPolicy": "Never", "containers": [{
                           "name": "c", "image": "x",
                           "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}}}]}}}
    path = tmp_path / "sly.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, err = run(["validate", "-f", str(path)], capsys)
    assert (code, err) == (0, "")
    assert "2 pods (all in one gang), priority 0, requests nvidia.com/gpu 16" in out
    assert "GenericItems[0] declares less in custompodresources than its pods request" in out


SAMPLES = FIXTURES / "appwrapper-v1beta2"


def test_the_appwrapper_projects_samples_are_valid(capsys: pytest.CaptureFixture[str]) -> None:
    """project-codeflare/appwrapper's samples, unchanged: every one valid, with the pods
    its inference finds (a JobSet of 2 x 2 workers and a driver: 5; a LeaderWorkerSet
    whose declared workers are fewer than its template makes: counted as its template)."""
    code, out, err = run(["validate", "-f", str(SAMPLES)], capsys)
    assert code == 0, err
    pods = {line.split('"')[1]: line.split(": ")[2].split(" (")[0] for line in out.splitlines()}
    assert pods == {
        "sample-deployment": "2 pods", "sample-failing-job": "1 pod",
        "sample-failing-pod": "1 pod", "sample-failing-pytorch-job": "2 pods",
        "sample-gpu-job": "1 pod", "sample-job": "1 pod", "sample-jobset": "5 pods",
        "sample-lws": "6 pods", "sample-pod": "1 pod", "sample-pytorch-job": "3 pods"}
    assert "sample-gpu-job\": 1 pod (all in one gang), requests cpu 1, nvidia.com/gpu 4" in out
    assert "spec.components[0] declares less in podSets than its pods request" in out
    assert err.count("kueue.x-k8s.io/queue-name: ignored, since the mcad configuration maps "
                     "no queue names to quota (queueNames)") == 10


V1BETA2_JOB = {
    "apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
    "metadata": {"name": "w", "namespace": "team-a"},
    "spec": {"components": [{"template": {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
        "spec": {"parallelism": 2, "template": {"spec": {"containers": [
            {"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}}}}}]}}


@pytest.mark.parametrize(("change", "says"), [
    ({"podSets": [{"path": "template.spec.templat", "replicas": 2}]},
     'spec.components[0].podSets[0].path: "template.spec.templat" leaves the template at '
     "template.spec.templat (no such field)"),
    ({"podSets": [{"path": "template.spec.template", "replicas": 3}]},
     "spec.components[0].podSets: template.spec.template declares 3 replicas, but the "
     "template makes 2 pods there"),
    ({"template": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"},
                   "spec": {}}},
     "spec.components: no component makes pods"),
    ({"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                   "spec": {"containers": [{"name": "c", "resources": {"requests": {
                       "cpu": "lots"}}}]}}},
     "components[0] (Kind v1 Pod): template.spec.containers[0].resources.requests.cpu"),
])
def test_a_v1beta2_appwrapper_is_refused_in_its_own_words(
        change: dict[str, object], says: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(yaml.safe_dump(V1BETA2_JOB))
    doc["spec"]["components"][0].update(change)
    path = tmp_path / "aw.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, err = run(["validate", "-f", str(path)], capsys)
    assert code == 1 and says in err, err
    assert "GenericItems" not in err and "generictemplate" not in err


def test_pod_set_infos_are_kept_and_said_to_be_ignored(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What Kueue would inject into admitted pod templates: mcad places pods itself."""
    doc = yaml.safe_load(yaml.safe_dump(V1BETA2_JOB))
    doc["spec"]["components"][0]["podSetInfos"] = [{"nodeSelector": {"zone": "a"}}]
    path = tmp_path / "aw.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, err = run(["validate", "-f", str(path)], capsys)
    assert code == 0
    assert ("spec.components[0].podSetInfos: accepted for AppWrapper v1beta2 compatibility and "
            "not acted on (Kueue's injection for the pods it admits; mcad places the pods "
            "itself)") in err

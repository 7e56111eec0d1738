"""The commands people reach mcad through, on the real test bed: a plain Job wrapped by
``mcad wrap --apply`` runs to completion, and ``kubectl mcad queue`` (the same CLI as a
kubectl plugin, found on PATH by kubectl itself) lists the waiting in the dispatcher's
order, with kubectl's own ``--kubeconfig`` and ``-n``."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import yaml

from e2e.clusters import Cluster
from e2e.controller import REPO, fill_spokes
from e2e.dispatch.conftest import (
    ControllerProcess,
    condition,
    create_aw,
    job_appwrapper,
    wait_state,
)
from e2e.waiting import wait_until


async def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *args, cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_a_plain_job_wrapped_by_mcad_wrap_runs_to_completion(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        tmp_path: Path) -> None:
    hub, ns = clusters["hub"], aw_namespace
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "plain"},
           "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0, "template": {
               "metadata": {"annotations": {"mcad.test/runtime": "2s"}},
               "spec": {"restartPolicy": "Never", "containers": [{
                   "name": "main", "image": "busybox",
                   "resources": {"requests": {"nvidia.com/gpu": "4", "cpu": "1"},
                                 "limits": {"nvidia.com/gpu": "4"}}}]}}}}
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job))
    code, _, err = await run(sys.executable, "-m", "mcad.cli", "wrap", "-f", str(manifest),
                               "-n", ns, "--priority", "3", "--apply",
                               "--kubeconfig", str(mcad.hub_kubeconfig))
    assert code == 0, err
    done = await wait_state(hub, ns, "plain", "Completed", within=90)
    assert done["spec"]["priority"] == 3
    assert condition(done, "Dispatched").get("status") == "True"


async def test_kubectl_mcad_queue_lists_the_waiting_in_order(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        kubectl_path: Path) -> None:
    hub, ns = clusters["hub"], aw_namespace
    await fill_spokes(hub, ns)  # both spokes: 4 nodes x 8 GPUs each
    for name, priority in (("low", 1), ("high", 9)):
        await create_aw(hub, ns, job_appwrapper(name, pods=1, gpus=8, runtime=None,
                                                priority=priority))
    # kubectl finds the plugin on PATH (the venv's kubectl-mcad) and passes every
    # argument after "mcad" to it, as it would for any plugin.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                                 f"{os.environ.get('PATH', '')}"}

    async def listed() -> list[str] | None:
        code, out, err = await run(str(kubectl_path), "mcad", "queue", "-n", ns, "-o", "json",
                                   "--kubeconfig", str(mcad.hub_kubeconfig), env=env)
        assert code == 0, err
        names = [i["metadata"]["name"] for i in json.loads(out)["items"]]
        return names if len(names) == 2 else None

    assert await wait_until(listed, within=30, what="two AppWrappers queued") == ["high", "low"]
    code, _, err = await run(str(kubectl_path), "mcad", "queue", "--bogus", env=env)
    assert code == 2
    assert err.startswith("usage: kubectl mcad ")

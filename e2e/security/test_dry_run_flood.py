"""Dry runs cannot stall the leader, on the real test bed: for 30 s, dry runs are sent
through the hub's API server without a pause (four senders of valid AppWrappers, one of
a 1.5 kB body of nested YAML aliases, the "billion laughs" that once held the event loop
for seconds); meanwhile ``/healthz`` is asked every 50 ms and must answer within 100 ms
at p99, and an AppWrapper created in the middle of the flood must be dispatched within
2 s. The aliases are refused with a sentence. (That the leader works out one dry run at
a time, and tells the next to come back after 2 s with 429, is tested in
tests/visibility/test_dryrun.py: here each is done before the next one's wait is over.)"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from e2e.clusters import Cluster
from e2e.controller import ControllerProcess, create_aw, job_appwrapper, wait_state
from e2e.waiting import wait_until

FLOOD_S = 30.0
LAUGHS = "\n".join(
    ["a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]"
       for i in range(8)])


def admin_session_args(kubeconfig: Path) -> tuple[str, dict[str, str], ssl.SSLContext]:
    """The hub's URL, the admin's headers and TLS context, from the test bed kubeconfig."""
    config: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())
    cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
    context = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    return cluster["server"], {"Authorization": f"Bearer {user['token']}"}, context


async def test_a_flood_of_dry_runs_leaves_the_leader_responsive(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str) -> None:
    hub, ns = clusters["hub"], aw_namespace
    server, headers, context = admin_session_args(mcad.hub_kubeconfig)
    url = f"{server}/apis/visibility.codeflare.dev/v1alpha1/namespaces/{ns}/explanations"
    valid = json.dumps(job_appwrapper("maybe", pods=2, gpus=4)).encode()
    answers: dict[str, int] = {}
    refusals: set[str] = set()
    latencies: list[float] = []
    deadline = 0.0  # set when the flood starts

    async def send(session: aiohttp.ClientSession, body: bytes, kind: str) -> None:
        while time.monotonic() < deadline:
            async with session.post(url, data=body, ssl=context,
                                    headers={**headers, "Content-Type": kind}) as answer:
                reply = await answer.json(content_type=None)
                key = f"{kind.split('/')[1]} {answer.status}"
                answers[key] = answers.get(key, 0) + 1
                if answer.status == 400:
                    refusals.add(reply["message"])

    async def probe(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            async with session.get(f"http://127.0.0.1:{mcad.port}/healthz") as answer:
                assert answer.status == 200
                await answer.read()
            latencies.append(time.perf_counter() - started)
            await asyncio.sleep(0.05)

    async def submit_midway() -> float:
        await asyncio.sleep(FLOOD_S / 3)
        created = time.monotonic()
        await create_aw(hub, ns, job_appwrapper("during", pods=1, gpus=1, runtime="1s"))
        await wait_state(hub, ns, "during", "Running", "Completed", within=30)
        return time.monotonic() - created

    async with aiohttp.ClientSession() as session:
        # The session's controller registers the visibility API when it leads; an earlier
        # test may have restarted it, or another controller may have registered last. The
        # flood measures the leader, so it starts once the hub reaches it.
        async def served() -> bool:
            async with session.get(
                    f"{server}/apis/visibility.codeflare.dev/v1alpha1/namespaces/{ns}/"
                    "pendingappwrappers", ssl=context, headers=headers) as answer:
                await answer.read()
                return answer.status == 200

        await wait_until(served, within=60, what="the visibility API to answer through the hub")
        deadline = time.monotonic() + FLOOD_S
        tasks = [send(session, valid, "application/json") for _ in range(4)]
        tasks += [send(session, LAUGHS.encode(), "application/yaml"), probe(session)]
        *_, dispatched_in = await asyncio.gather(*tasks, submit_midway())

    latencies.sort()
    p99 = latencies[int(0.99 * (len(latencies) - 1))]
    figures = {"healthz_p99_ms": round(1000 * p99, 1), "healthz_max_ms":
               round(1000 * latencies[-1], 1), "probes": len(latencies),
               "dispatched_in_s": round(dispatched_in, 2), "answers": answers}
    print(f"dry-run flood: {figures}")
    assert p99 < 0.100, figures
    assert dispatched_in < 2.0, figures
    assert answers.get("json 201", 0) >= 1, figures  # (one at a time: tests/visibility)
    assert answers.get("yaml 400", 0) >= 1 and not answers.get("yaml 201"), figures
    assert any("anchors or aliases" in message for message in refusals), refusals

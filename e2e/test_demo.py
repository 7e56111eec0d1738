"""The demo's summary (``make demo``): what it counts as dispatched and what it says of a
Failed AppWrapper. The demo itself runs in ``make test`` as ``python -m e2e.demo --quick``."""

from __future__ import annotations

from typing import Any

from e2e.demo import appwrappers, summary


def aw(name: str, state: str, cluster: str = "", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"state": state, "clusterName": cluster, **status}}


def test_a_failed_appwrapper_is_never_counted_as_dispatched_and_says_why() -> None:
    refused = aw("train-8gpu", "Failed", conditions=[
        {"type": "Dispatched", "status": "False"},
        {"type": "Failed", "status": "True", "reason": "NamespaceNotManaged",
         "message": "namespace default exists on cluster spoke-1 and mcad did not create it"}])
    done = aw("train-1gpu", "Completed", "spoke-2",
              controllerfirstdispatchtimestamp="2026-01-01T00:00:05Z")
    text = summary([refused, done], 30.0)
    assert text.splitlines()[0] == "2 AppWrappers in 30s: 1 Completed, 1 Failed"
    assert text.splitlines()[1] == "completed on: spoke-2 1"
    assert "train-8gpu failed: NamespaceNotManaged: namespace default exists" in text


def test_the_quick_demo_submits_the_same_appwrappers_with_shorter_pods() -> None:
    full, quick = appwrappers(), appwrappers(runtime="3s")
    assert [d["metadata"]["name"] for d in full] == [d["metadata"]["name"] for d in quick]
    assert len(full) == 11
    assert '"20s"' not in str(quick) and "'3s'" in str(quick)

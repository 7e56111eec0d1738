"""What an AppWrapper record keeps of the hub object: everything mcad reads, not the
bookkeeping that can double its size (managedFields, kubectl's last-applied copy)."""

from __future__ import annotations

import copy

from mcad.controller.records import AppWrapperRecord


def test_a_record_drops_managed_fields_and_the_last_applied_copy_only() -> None:
    rec = AppWrapperRecord.of({"metadata": {
        "name": "a", "namespace": "n", "uid": "u", "resourceVersion": "5",
        "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}",
                        "workload.codeflare.dev/elastic": "true"}},
        "spec": {"priority": 3}})
    assert "managedFields" not in rec.meta
    assert rec.meta["annotations"] == {"workload.codeflare.dev/elastic": "true"}
    assert (rec.elastic, rec.priority) == (True, 3)


def test_the_spec_is_kept_encoded_and_read_as_it_was() -> None:
    """The spec is kept as compact JSON (the decoded templates were 2.8 KB per
    AppWrapper); every reader gets it as sent, a copy of its own, and a new generation's
    fields are read anew."""
    spec = {"priority": 3, "schedulingSpec": {"dispatchDuration": {"limit": 60}},
            "resources": {"GenericItems": [{"generictemplate": {
                "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}}]}}
    obj = {"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
           "metadata": {"name": "a", "namespace": "n", "uid": "u", "resourceVersion": "5",
                        "generation": 1}, "spec": spec, "status": {"state": "Running"}}
    rec = AppWrapperRecord.of(copy.deepcopy(obj))
    assert "spec" not in rec.observed.head
    assert rec.obj == obj and rec.spec == spec
    rec.spec["priority"] = 99  # a reader's copy
    assert (rec.priority, rec.run_limit(), rec.kinds()) == (3, 60, (("batch/v1", "Job"),))
    digest = rec.spec_digest()
    newer = copy.deepcopy(obj)
    newer["metadata"].update(resourceVersion="6", generation=2)
    newer["spec"].update(priority=7, schedulingSpec={"dispatchDuration": {"limit": 30}})
    newer["spec"]["resources"]["GenericItems"][0]["generictemplate"]["kind"] = "PyTorchJob"
    assert rec.observed.take(newer)
    assert (rec.priority, rec.run_limit(), rec.kinds()) == (7, 30, (("batch/v1",
                                                                      "PyTorchJob"),))
    assert rec.spec_digest() != digest

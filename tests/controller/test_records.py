"""What an AppWrapper record keeps of the hub object: everything mcad reads, not the
bookkeeping that can double its size (managedFields, kubectl's last-applied copy)."""

from __future__ import annotations

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

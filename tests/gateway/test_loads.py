"""``connection.loads``: what the API server sends, decoded with its keys and short values
shared between objects (mcad keeps tens of thousands of them)."""

from __future__ import annotations

import json

from mcad.gateway.connection import SHARED_VALUE_CHARS, loads


def test_it_decodes_what_json_decodes() -> None:
    text = json.dumps({"kind": "Pod", "n": [1, 2.5, None, True], "nested": {"a": {"b": "c"}},
                       "long": "x" * 200, "empty": {}, "list": [{"k": "v"}]})
    assert loads(text) == json.loads(text)
    assert loads(text.encode()) == json.loads(text)


def test_keys_and_short_values_are_one_object_across_answers() -> None:
    first = loads(b'{"status": {"conditions": [{"type": "Ready", "status": "True"}]}}')
    second = loads(b'{"status": {"conditions": [{"type": "Ready", "status": "True"}]}}')
    (c1,), (c2,) = first["status"]["conditions"], second["status"]["conditions"]
    assert [k1 is k2 for k1, k2 in zip(c1, c2, strict=True)] == [True, True]
    assert c1["status"] is c2["status"]


def test_long_values_are_left_alone() -> None:
    long = "m" * (SHARED_VALUE_CHARS + 1)
    first, second = loads(json.dumps({"message": long})), loads(json.dumps({"message": long}))
    assert first["message"] == second["message"]
    assert first["message"] is not second["message"]


def test_an_objects_managed_fields_are_dropped_as_it_is_decoded() -> None:
    obj = loads(json.dumps({"metadata": {
        "name": "a", "resourceVersion": "7",
        "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]},
        "data": {"managedFields": "a user's own key"}}))
    assert obj == {"metadata": {"name": "a", "resourceVersion": "7"},
                   "data": {"managedFields": "a user's own key"}}


def test_the_managed_fields_of_a_watch_events_object_and_of_list_items_are_dropped() -> None:
    managed = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    event = loads(json.dumps({"type": "MODIFIED", "object": {"metadata": {
        "name": "a", "resourceVersion": "7", "managedFields": managed}}}))
    assert event["object"]["metadata"] == {"name": "a", "resourceVersion": "7"}
    page = loads(json.dumps({"metadata": {"resourceVersion": "9"}, "items": [
        {"metadata": {"name": n, "resourceVersion": "8", "managedFields": managed}}
        for n in ("a", "b")]}))
    assert [item["metadata"] for item in page["items"]] == [
        {"name": "a", "resourceVersion": "8"}, {"name": "b", "resourceVersion": "8"}]


def test_what_the_fast_decoder_refuses_is_decoded_as_python_decodes_it() -> None:
    # An escaped lone surrogate: valid JSON to Python, refused by pydantic_core.
    text = '{"metadata": {"resourceVersion": "1", "managedFields": []}, "note": "\\ud800"}'
    assert loads(text) == {"metadata": {"resourceVersion": "1"}, "note": "\ud800"}

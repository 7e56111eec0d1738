"""The topology fields of the wire models: an AppWrapper's schedulingSpec.topology (one
of required and preferred, a label key), a SpokeCluster's spec.topology.levels (label
keys, each once), and what ``mcad validate`` and the webhook say about them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mcad.api.spokecluster import SpokeCluster
from mcad.config import RunConfig
from mcad.core.workload.topology import REQUIRED_ANNOTATION
from mcad.validation import check_appwrapper
from tests.builders.appwrappers import AppWrapperBuilder, make_appwrapper

RACK = "example.com/rack"


@pytest.mark.parametrize(("builder", "want"), [
    (make_appwrapper("t").job(gpu=8).topology(required=RACK), []),
    (make_appwrapper("t").job(gpu=8).topology(required="a b"),
     ["spec.schedulingSpec.topology.required: 'a b' is not a label key (a name of at most 63 "
      "letters, digits, '-', '_' and '.', optionally after a DNS prefix and '/')"]),
    (make_appwrapper("t").job(gpu=8).topology(required=RACK, preferred=RACK),
     ["spec.schedulingSpec.topology.required: give exactly one of required and preferred "
      "(a node label key)"]),
    (make_appwrapper("t").job(gpu=8, name="j", annotations={REQUIRED_ANNOTATION: ""}),
     [f"GenericItems[0] Job/j: the annotation {REQUIRED_ANNOTATION} must be a node label "
      "key, not ''"]),
], ids=["a label key", "not a label key", "both", "an empty Kueue annotation"])
def test_validate_says_what_is_wrong_with_a_topology_wish(builder: AppWrapperBuilder,
                                                          want: list[str]) -> None:
    assert check_appwrapper(builder.obj(), config=RunConfig()).problems == want


def spoke(levels: list[str]) -> dict[str, object]:
    return {"apiVersion": "cluster.codeflare.dev/v1alpha1", "kind": "SpokeCluster",
            "metadata": {"name": "s"}, "spec": {"local": True, "topology": {"levels": levels}}}


def test_spoke_levels_are_label_keys_named_once() -> None:
    assert SpokeCluster.model_validate(spoke([RACK, "kubernetes.io/hostname"])).spec.topology
    with pytest.raises(ValidationError, match=r"names example\.com/rack twice"):
        SpokeCluster.model_validate(spoke([RACK, RACK]))
    with pytest.raises(ValidationError, match="is not a label key"):
        SpokeCluster.model_validate(spoke(["rack!"]))


def test_the_policy_s_levels_are_label_keys_named_once() -> None:
    assert RunConfig(topology_levels=[RACK]).topology_levels == [RACK]
    with pytest.raises(ValidationError, match=r"names example\.com/rack twice"):
        RunConfig(topology_levels=[RACK, RACK])

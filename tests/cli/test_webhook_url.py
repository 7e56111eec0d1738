"""``mcad run --webhook-url``: a URL without mcad's path gets it, never a registration
the API server cannot call (which failed every AppWrapper create with "the server could
not find the requested resource")."""

from __future__ import annotations

import pytest

from mcad.cli.run import webhook_url
from mcad.server import ListenError


@pytest.mark.parametrize(("given", "want"), [
    ("https://10.0.0.5:9443", "https://10.0.0.5:9443/validate-appwrapper"),
    ("https://10.0.0.5:9443/", "https://10.0.0.5:9443/validate-appwrapper"),
    ("https://10.0.0.5:9443/validate-appwrapper", "https://10.0.0.5:9443/validate-appwrapper"),
    ("https://gw.example/mcad/validate-appwrapper/",
     "https://gw.example/mcad/validate-appwrapper"),
])
def test_the_path_is_added_or_kept(given: str, want: str) -> None:
    assert webhook_url(given) == want


@pytest.mark.parametrize(("given", "says"), [
    ("http://10.0.0.5:9443", "is not an https:// URL"),
    ("https:///validate-appwrapper", "is not an https:// URL"),
    ("https://10.0.0.5:9443/validate", "mcad serves its webhook at /validate-appwrapper"),
    ("https://10.0.0.5:9443/validate-appwrapper?x=1", "has a query or fragment"),
])
def test_anything_else_is_refused_with_a_sentence(given: str, says: str) -> None:
    with pytest.raises(ListenError, match=says.replace("?", r"\?")):
        webhook_url(given)

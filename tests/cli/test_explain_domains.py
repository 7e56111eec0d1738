"""``mcad explain`` prints, under each cluster, every domain of the topology level the
AppWrapper asks for, with whether the whole gang fits there."""

from __future__ import annotations

from mcad.cli.queue import explanation_text


def test_domains_are_listed_under_their_cluster() -> None:
    answer = {"key": "ns/train", "outcome": "InsufficientCapacity", "message": "no rack",
              "position": 1, "checks": [], "ahead": [], "estimate_basis": "it fits now",
              "cycle": "2026-01-01T00:00:00Z", "clusters": [
                  {"cluster": "spoke-1", "ok": False, "detail": "no rack holds the gang",
                   "domains": [{"domain": "rack b1/r1", "ok": False, "detail": "12 free"},
                               {"domain": "rack b1/r2", "ok": True, "detail": "16 free"}]},
                  {"cluster": "spoke-22", "ok": True, "detail": "fits", "domains": []}]}
    lines = explanation_text(answer).splitlines()
    start = lines.index("Clusters:")
    assert lines[start + 1:start + 5] == [
        "  spoke-1   no    no rack holds the gang",
        "              no    rack b1/r1: 12 free",
        "              fits  rack b1/r2: 16 free",
        "  spoke-22  fits  fits"]

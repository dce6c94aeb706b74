"""``make demo`` runs and tells the story in words."""

from __future__ import annotations

import pytest

from simulator import demo

pytestmark = pytest.mark.e2e


def test_demo_prints_what_it_saw_decided_and_launched(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main() == 0
    out = capsys.readouterr().out
    for expected in ("5 pending pods", "new spot node(s)", "launched for: default/inflate-00000",
                     "--register-with-taints=karpenter.sh/unregistered:NoExecute",
                     "5 fit existing or in-flight capacity",
                     # the kubelet registers with the taint: the pass after registration launches nothing
                     "Third pass: scheduled pass: 5 pending pod(s): 5 fit existing or in-flight capacity",
                     "pending pods now: 0"):
        assert expected in out
    # one node claim per instance, recorded before CreateFleet, each naming its own instance
    [line] = [x for x in out.splitlines() if x.startswith("Node claims recorded in DynamoDB")]
    pairs = line.split(": ", 1)[1].split(", ")
    assert len(pairs) == 2 and len({p.split(" -> ")[1] for p in pairs}) == 2 and "(launching)" not in line

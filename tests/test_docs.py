"""The operator docs are reference: current behaviour and current figures, nothing outside the repository.

Every page of docs/ and the README is read line by line for the marks of a diary (a figure "before" a
change beside today's, "previously", "used to", issue numbers, commits, sessions), for absolute paths
outside the work tree, and for links to files that do not exist. Measurement history belongs in
benchmarks/results/ (dated files), which this check does not read.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([*ROOT.joinpath("docs").glob("*.md"), ROOT / "README.md"])

# Each pattern names a past state of the project, not a behaviour. They are phrased so that reference prose
# ("no longer matches its NodePool", "the key used to sign", "before the first spot launch") passes.
HISTORY: dict[str, str] = {
    r"\bpreviously\b|\bformerly\b|\buntil now\b": "a past state",
    r"\bused to (?:be|run|walk|lose|take|cost|register|launch|read|write|list|wait)\b": "a past behaviour",
    r"\b(?:this|last|previous|earlier|an earlier|the same) session\b": "a working session",
    r"\bissue\s*#?\d+": "an issue number",
    r"\bcommits?\s+[0-9a-f]{7,40}\b|\bbase [0-9a-f]{7,40}\b": "a commit",
    r"\bbefore (?:this|that|the) (?:work|fix|change|refactor|merge|cut|cache|warm cache|cooperative)\b":
        "a figure before a change",
    r"^history of\b": "a history of figures",
    r"\bbefore \((?:last|this|commit)": "a figure before a change",
    r"\b(?:an|the) earlier run (?:found|measured|gave|showed)|\bearlier runs'|"
    r"\b(?:earlier|older|previous|last) (?:measurements?|tables?|figures?|model)\b": "an earlier run",
    r"\bafter (?:the|this) (?:merge|fix|cut|change)s?\b": "a figure after a change",
    r"\bwas\s+\d[\d.,]*\s?(?:ms|s|MB|MiB|GB|%|minutes?)\b": "a figure it was",
    r"\d[\d.,]*\s?(?:ms|s|MB|MiB|%)\s?(?:→|->)\s?\d[\d.,]*\s?(?:ms|s|MB|MiB|%)": "a before → after figure",
    r"\bis new\b|\bnew in (?:this|v?\d)": "news",
    r"\bmerged since\b|\bsince (?:then|the fix|the change|the merge)\b": "a change over time",
    r"\b(?:found|fixed) (?:this|in this|during)\b|\bnow fixed\b": "a fix's story",
    r"\bbefore/after\b|\bthe old (?:tree|platform|passes|code|model|table)\b": "a comparison with the past",
    r"\bwave \d\b": "a working phase",
    r"\bbefore this (?:version|release|default)\b|\bfrom a release whose\b": "an earlier release",
}
# Absolute paths of the machine that wrote a page, and notes kept beside the repository.
OUTSIDE: dict[str, str] = {
    r"(?<![\w.~}-])/(?:work|tmp|root|home|Users|mnt)/": "an absolute path outside the repository",
    r"\.\./shared\b|\bshared/(?:DESIGN|STYLE|NOTES)": "the team's notes outside the repository",
    r"~/(?!\.cache}?/(?:eks-autoscaler|go-build)\b|\.kube/config\b|\.pyenv/versions\b)": "a home-directory path",
}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A file of the repository named in code (`tests/scenarios/test_describe.py`): from a top-level directory, with a
# file extension, no placeholder or glob. Paths relative to a package (`sim/watch.py`) are not checked.
TOP = "|".join(sorted(re.escape(p.name) for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")))
REPO_FILE = re.compile(rf"`((?:{TOP})/[\w./-]+\.(?:py|md|yaml|yml|json|sh|txt|toml|go|mod))`")


def _findings(lines: list[str], patterns: dict[str, str]) -> list[str]:
    found = []
    for number, line in enumerate(lines, 1):
        for pattern, what in patterns.items():
            match = re.search(pattern, line, flags=re.IGNORECASE)
            if match:
                found.append(f"line {number}: {what}: {match.group(0)!r}")
    return found


def _broken_links(page: Path, lines: list[str]) -> list[str]:
    found = []
    for number, line in enumerate(lines, 1):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a web address, mailto:, or an anchor in the page
            path = target.split("#", 1)[0]
            resolved = (page.parent / path).resolve()
            if not resolved.exists() or not resolved.is_relative_to(ROOT):
                found.append(f"line {number}: a link to a file that is not in the repository: {target!r}")
    return found


def _missing_files(lines: list[str]) -> list[str]:
    return [f"line {number}: a file that is not in the repository: {path!r}"
            for number, line in enumerate(lines, 1) for path in REPO_FILE.findall(line)
            if not (ROOT / path).exists()]


def check(page: Path, text: str) -> list[str]:
    lines = text.splitlines()
    return (_findings(lines, HISTORY) + _findings(lines, OUTSIDE) + _broken_links(page, lines)
            + _missing_files(lines))


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_a_page_states_current_behaviour_only(page: Path) -> None:
    findings = check(page, page.read_text(encoding="utf-8"))
    assert not findings, (
        f"{page.relative_to(ROOT)} is operator reference (docs/README.md): state current behaviour and current "
        "figures; move measurement history to benchmarks/results/ (a dated file) and keep paths inside the "
        "repository:\n  " + "\n  ".join(findings))


@pytest.mark.parametrize("planted", [
    "The pass took 6.2 s before the warm cache and 0.4 s now.",
    "Plan time was 30 ms, now 3 ms.",
    "Offerings are re-used: 30 ms → 3 ms per plan.",
    "(Found this session and fixed: before, nothing woke the provisioner.)",
    "A drain's sleep used to run every event due up to its end.",
    "Measured on commit 463f6b7, load 23.",
    "issue 16's speed target",
    "History of the full-mix ratio: 1.364 before shaped nodes, 1.128 since.",
    "Solve time against the code before that work: 1.30 s vs 1.46 s.",
    "An earlier run found 19 lifecycle-hook events.",
    "Instances launched before this version have no hash tags.",
    "See /work/shared/DESIGN.md for the layers.",
    "As ../shared/NOTES.md says.",
    "Logs are in ~/notes/run.txt.",
    "See [the design](design-notes.md).",
    "`tests/simulator/test_nothing_here.py` compares the answers.",
])
def test_the_check_finds_a_planted_line(planted: str, tmp_path: Path) -> None:
    # Given a page of otherwise reference prose with one line of history or an outside path planted in it
    page = tmp_path / "page.md"
    text = f"# Page\n\nThe provisioner launches for pending pods.\n{planted}\n"
    # When it is checked, Then that line is found
    findings = check(page, text)
    assert findings and all(f.startswith("line 4:") for f in findings)


@pytest.mark.parametrize("reference", [
    "A node has drifted when it no longer matches its NodePool.",
    "Before the first spot launch in an account, the service-linked role must exist.",
    "The kubeconfig file (default: `$KUBECONFIG`, then `~/.kube/config`).",
    "Built into `${XDG_CACHE_HOME:-~/.cache}/eks-autoscaler/kube-1.33/`.",
    "Scale the old autoscaler to zero and remove the Node Termination Handler.",
    "The key used to sign the token is the role's.",
    "`tests/scenarios/test_describe.py` compares answers; `sim/watch.py` batches; `clusters/<name>.yaml`.",
    "See [deploy.md](deploy.md#bytecode) and [Karpenter](https://karpenter.sh/).",
])
def test_reference_prose_passes(reference: str) -> None:
    assert check(ROOT / "docs" / "page.md", f"# Page\n\n{reference}\n") == []

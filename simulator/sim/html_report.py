"""``--report out.html``: one self-contained HTML file an operator opens in a browser (no network: the
charts are inline SVG, the little script and the styles are inline too).

It shows, on one time axis in minutes: nodes by NodePool and capacity type (stacked), pending and running
pods, dollars per hour and cumulative dollars (ours, and the Cluster-Autoscaler baseline's when it ran, each
on its own labelled chart), and a lane of markers for launches, disruptions, interruptions, evictions and
terminations (hover one for its time and objects); the scenario's steps are dotted lines across every chart.
Below: the summary table (with the baseline's figures beside ours), the assertions with their results and
the timeline.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from typing import Any

from simulator.sim.facts import clock_text
from simulator.sim.report import check, summary
from simulator.sim.runner import Record

WIDTH, LEFT, RIGHT = 1000, 96, 20
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
EVENT_LANES = (("launch", "launches", "#2ca02c"), ("disruption", "disruptions", "#9467bd"),
               ("interruption", "interruptions", "#d62728"), ("eviction", "evictions", "#ff7f0e"),
               ("termination", "terminations", "#7f7f7f"))
SUMMARY_ROWS = (("max_nodes", "most nodes"), ("nodes_at_end", "nodes at end"), ("launches", "launches"),
                ("terminations", "terminations"), ("duplicate_launches", "duplicate launches"),
                ("evictions", "evictions"), ("pdb_violations", "PDB violations"), ("dollars", "dollars spent"),
                ("max_pending_pods", "most pending pods"), ("pending_pod_seconds", "pending pod-seconds"),
                ("time_to_running_p50", "time to Running p50 (s)"), ("time_to_running_p95", "time to Running p95 (s)"),
                ("time_to_running_max", "time to Running max (s)"), ("pods_never_running", "pods never Running"),
                ("interrupted_instances", "spot instances interrupted"), ("handler_errors", "handler errors"))


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


class _Chart:
    """One SVG chart over [0, until] seconds with a labelled y axis."""

    def __init__(self, title: str, y_label: str, until: float, y_max: float, *, height: int = 180,
                 integer: bool = False) -> None:
        self.title, self.y_label, self.until, self.height = title, y_label, max(until, 1.0), height
        self.integer = integer
        self.y_max = y_max if y_max > 0 else 1.0
        self.top, self.bottom = 24, height - 28
        self.parts: list[str] = []
        self.legend: list[tuple[str, str, bool]] = []

    def x(self, t: float) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * min(max(t, 0.0), self.until) / self.until

    def y(self, v: float) -> float:
        return self.bottom - (self.bottom - self.top) * v / self.y_max

    def step(self, points: Sequence[tuple[float, float]], color: str, label: str, *, dashed: bool = False,
             linear: bool = False) -> None:
        """A step line (each sample's value holds until the next sample), or with ``linear`` a polyline (a
        running total such as dollars spent)."""
        if not points:
            return
        path = [f"M{self.x(points[0][0]):.1f},{self.y(points[0][1]):.1f}"]
        for t1, v1 in points[1:]:
            path.append(f"L{self.x(t1):.1f},{self.y(v1):.1f}" if linear else f"H{self.x(t1):.1f}V{self.y(v1):.1f}")
        if not linear:
            path.append(f"H{self.x(self.until):.1f}")
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        self.parts.append(f'<path d="{"".join(path)}" fill="none" stroke="{color}" stroke-width="2"{dash}>'
                          f"<title>{_esc(label)}</title></path>")
        self.legend.append((label, color, dashed))

    def stacked(self, times: Sequence[float], layers: Sequence[tuple[str, Sequence[float]]]) -> None:
        base = [0.0] * len(times)
        for i, (label, values) in enumerate(layers):
            color = PALETTE[i % len(PALETTE)]
            top = [b + v for b, v in zip(base, values, strict=True)]
            upper, lower = [], []
            for j, t in enumerate(times):
                t_next = times[j + 1] if j + 1 < len(times) else self.until
                upper += [(t, top[j]), (t_next, top[j])]
                lower += [(t, base[j]), (t_next, base[j])]
            pts = upper + lower[::-1]
            d = "M" + "L".join(f"{self.x(t):.1f},{self.y(v):.1f}" for t, v in pts) + "Z"
            self.parts.append(f'<path d="{d}" fill="{color}" fill-opacity="0.55" stroke="{color}" stroke-width="1">'
                              f"<title>{_esc(label)}</title></path>")
            self.legend.append((label, color, False))
            base = top

    def marker(self, t: float, v: float, color: str, tip: str, kind: str) -> None:
        self.parts.append(f'<circle class="marker" data-kind="{_esc(kind)}" data-tip="{_esc(tip)}" '
                          f'cx="{self.x(t):.1f}" cy="{self.y(v):.1f}" r="5" fill="{color}" fill-opacity="0.8">'
                          f"<title>{_esc(tip)}</title></circle>")

    def steps_of_scenario(self, rec: Record) -> None:
        for t, source, text in rec.timeline:
            if source == "scenario":
                x = self.x(t)
                self.parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{self.top}" y2="{self.bottom}" '
                                  f'stroke="#888" stroke-dasharray="2 3"><title>{_esc(clock_text(t))} '
                                  f"{_esc(text)}</title></line>")

    def svg(self, y_ticks: Sequence[tuple[float, str]] | None = None) -> str:
        axis = [f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{self.bottom}" y2="{self.bottom}" stroke="#333"/>',
                f'<line x1="{LEFT}" x2="{LEFT}" y1="{self.top}" y2="{self.bottom}" stroke="#333"/>']
        if y_ticks is not None:
            ticks = list(y_ticks)
        elif self.integer:
            every = max(1, -(-int(self.y_max) // 5))
            ticks = [(float(v), str(v)) for v in range(0, int(self.y_max) + 1, every)]
        else:
            ticks = [(self.y_max * i / 4, _num(self.y_max * i / 4)) for i in range(5)]
        for v, text in ticks:
            axis.append(f'<text x="{LEFT - 6}" y="{self.y(v) + 4:.1f}" text-anchor="end" font-size="11">{text}</text>'
                        f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{self.y(v):.1f}" y2="{self.y(v):.1f}" '
                        f'stroke="#eee"/>')
        minutes = self.until / 60
        step = next(s for s in (1, 2, 5, 10, 15, 30, 60, 120, 240, 480) if minutes / s <= 12)
        m = 0
        while m <= minutes + 1e-9:
            x = self.x(m * 60)
            axis.append(f'<text x="{x:.1f}" y="{self.bottom + 16}" text-anchor="middle" font-size="11">{m:g}</text>')
            m += step
        axis.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{self.height - 2}" text-anchor="middle" '
                    f'font-size="11">minutes</text>')
        axis.append(f'<text x="14" y="{(self.top + self.bottom) / 2}" font-size="11" text-anchor="middle" '
                    f'transform="rotate(-90 14 {(self.top + self.bottom) / 2})">{_esc(self.y_label)}</text>')
        dash = ' stroke-dasharray="5 3"'
        legend = "".join(
            f'<span class="key"><svg width="22" height="10"><line x1="0" x2="22" y1="5" y2="5" stroke="{c}" '
            f'stroke-width="3"{dash if dashed else ""}/></svg>{_esc(label)}</span>'
            for label, c, dashed in self.legend)
        return (f'<figure class="chart"><figcaption>{_esc(self.title)}</figcaption><div class="legend">{legend}'
                f'</div><svg viewBox="0 0 {WIDTH} {self.height}" width="100%" role="img" '
                f'aria-label="{_esc(self.title)}">{"".join(axis)}{"".join(self.parts)}</svg></figure>')


def _num(v: float) -> str:
    return f"{v:.2f}" if 0 < abs(v) < 10 and v != int(v) else f"{v:.0f}"


def _series(rec: Record, value: Callable[[Any], float]) -> list[tuple[float, float]]:
    return [(s.t, float(value(s))) for s in rec.samples]


def _charts(rec: Record, base: Record | None) -> list[str]:
    until = rec.until
    times = [s.t for s in rec.samples]
    keys = sorted({k for s in rec.samples for k in s.nodes_by_pool_capacity})
    most_nodes = max([s.nodes for s in rec.samples] + [s.nodes for s in (base.samples if base else [])] + [1])
    nodes = _Chart("Nodes by NodePool / capacity type", "nodes", until, most_nodes, integer=True)
    nodes.stacked(times, [(k, [float(s.nodes_by_pool_capacity.get(k, 0)) for s in rec.samples]) for k in keys])
    if base is not None:
        nodes.step(_series(base, lambda s: s.nodes), "#000", "baseline (Cluster Autoscaler) nodes", dashed=True)
    nodes.steps_of_scenario(rec)

    most_pods = max([max(s.pending_pods, s.running_pods) for s in rec.samples] + [1])
    pods = _Chart("Pods", "pods", until, most_pods, integer=True)
    pods.step(_series(rec, lambda s: s.pending_pods), "#d62728", "pending pods")
    pods.step(_series(rec, lambda s: s.running_pods), "#1f77b4", "running pods")
    pods.steps_of_scenario(rec)

    hourly_max = max([s.dollars_per_hour for s in rec.samples] + [s.dollars_per_hour for s in (base.samples if base
                                                                                                else [])] + [0.01])
    hourly = _Chart("Dollars per hour", "$ / hour", until, hourly_max * 1.1)
    hourly.step(_series(rec, lambda s: s.dollars_per_hour), "#2ca02c", "ours $/h")
    if base is not None:
        hourly.step(_series(base, lambda s: s.dollars_per_hour), "#000", "baseline $/h", dashed=True)
    hourly.steps_of_scenario(rec)

    spent_max = max([s.dollars for s in rec.samples] + [s.dollars for s in (base.samples if base else [])] + [0.001])
    spent = _Chart("Dollars spent (cumulative)", "$ spent", until, spent_max * 1.1)
    spent.step(_series(rec, lambda s: s.dollars), "#2ca02c", "ours $ spent", linear=True)
    if base is not None:
        spent.step(_series(base, lambda s: s.dollars), "#000", "baseline $ spent", dashed=True, linear=True)
    spent.steps_of_scenario(rec)

    lanes = _Chart("Events (hover a marker for details)", "", until, len(EVENT_LANES) + 1, height=170)
    for i, (kind, label, color) in enumerate(EVENT_LANES):
        row = len(EVENT_LANES) - i
        for t, k, what in rec.events:
            if k == kind:
                lanes.marker(t, row, color, f"{clock_text(t)} {kind}: {what}", kind)
        lanes.legend.append((f"{label} ({sum(1 for e in rec.events if e[1] == kind)})", color, False))
    lanes.steps_of_scenario(rec)
    lane_ticks = [(float(len(EVENT_LANES) - i), label) for i, (_, label, _) in enumerate(EVENT_LANES)]
    return [nodes.svg(), pods.svg(), hourly.svg(), spent.svg(), lanes.svg(lane_ticks)]


def _summary_table(rec: Record, base: Record | None) -> str:
    ours, theirs = summary(rec), summary(base) if base is not None else None
    head = "<tr><th>figure</th><th>ours</th>" + ("<th>baseline</th>" if theirs else "") + "</tr>"
    rows = []
    for key, label in SUMMARY_ROWS:
        cells = f"<td>{_esc(label)}</td><td>{_esc(ours.get(key))}</td>"
        if theirs is not None:
            cells += f"<td>{_esc(theirs.get(key))}</td>"
        rows.append(f"<tr>{cells}</tr>")
    return f'<table class="summary">{head}{"".join(rows)}</table>'


def _assertions_table(results: list[dict[str, Any]]) -> str:
    if not results:
        return "<p>The scenario has no assertions.</p>"
    rows = "".join(
        f'<tr class="{"ok" if r["ok"] else "fail"}"><td>{"ok" if r["ok"] else "FAIL"}</td>'
        f'<td>{_esc(r["assertion"])}</td><td>{_esc(r["value"])}</td><td>{_esc(r.get("detail", ""))}</td></tr>'
        for r in results)
    return f'<table class="assertions"><tr><th></th><th>assertion</th><th>got</th><th>detail</th></tr>{rows}</table>'


STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 24px; color: #222; max-width: 1100px; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
figure.chart { margin: 10px 0 18px; } figcaption { font-weight: 600; font-size: 14px; }
.legend { font-size: 12px; margin: 4px 0 2px 96px; } .key { margin-right: 14px; white-space: nowrap; }
.key svg { vertical-align: middle; margin-right: 4px; }
table { border-collapse: collapse; font-size: 13px; } td, th { border: 1px solid #ddd; padding: 3px 8px; }
th { background: #f4f4f4; text-align: left; } tr.fail td { background: #fde2e2; } tr.ok td:first-child { color: #2a7; }
tr.fail td:first-child { color: #c00; font-weight: 700; }
#tip { position: fixed; pointer-events: none; background: #222; color: #fff; font-size: 12px; padding: 4px 6px;
       border-radius: 3px; display: none; max-width: 480px; }
circle.marker:hover { stroke: #000; stroke-width: 2; }
pre { font-size: 12px; background: #fafafa; padding: 8px; overflow-x: auto; }
"""

SCRIPT = """
(function () {
  var tip = document.getElementById('tip');
  document.querySelectorAll('circle.marker').forEach(function (m) {
    m.addEventListener('mousemove', function (e) {
      tip.textContent = m.getAttribute('data-tip');
      tip.style.display = 'block'; tip.style.left = (e.clientX + 12) + 'px'; tip.style.top = (e.clientY + 12) + 'px';
    });
    m.addEventListener('mouseleave', function () { tip.style.display = 'none'; });
  });
  var data = JSON.parse(document.getElementById('report-data').textContent);
  var charts = document.querySelectorAll('figure.chart > svg').length;
  document.body.setAttribute('data-rendered', charts === 5 && data.scenario ? 'ok' : 'incomplete');
})();
"""


def render(rec: Record, results: list[dict[str, Any]], baseline: Record | None = None) -> str:
    s = summary(rec)
    verdict = "all assertions hold" if all(r["ok"] for r in results) else \
        f"{sum(1 for r in results if not r['ok'])} assertion(s) FAIL"
    data = {"scenario": rec.scenario.name, "until": rec.until, "assertions": results,
            "events": [{"t": t, "kind": k, "what": w} for t, k, w in rec.events]}
    timeline = "\n".join(f"{clock_text(t)}  {src:<14} {text}" for t, src, text in rec.timeline)
    start = rec.scenario.start.strftime("%Y-%m-%d %H:%M:%S UTC")
    payload = json.dumps(data, default=str).replace("</", "<" + "\\/")  # no "</script>" inside the data
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Scenario {_esc(rec.scenario.name)}</title>
<style>{STYLE}</style>
<script>window.addEventListener('error', function (e) {{
  document.documentElement.setAttribute('data-js-error', String(e.message)); }});</script></head>
<body data-rendered="no">
<h1>Scenario {_esc(rec.scenario.name)}</h1>
<p>{_esc(rec.scenario.description)}</p>
<p>Virtual time {clock_text(rec.until)} from {start}; {_esc(verdict)}; {s['launches']} launch(es),
{s['evictions']} eviction(s), ${s['dollars']:.4f} spent{_baseline_line(baseline)}.</p>
<h2>Timeline</h2>
{"".join(_charts(rec, baseline))}
<h2>Summary</h2>
{_summary_table(rec, baseline)}
<h2>Assertions</h2>
{_assertions_table(results)}
<h2>Events, step by step</h2>
<details><summary>{len(rec.timeline)} lines</summary><pre>{_esc(timeline)}</pre></details>
<div id="tip"></div>
<script type="application/json" id="report-data">{payload}</script>
<script>{SCRIPT}</script>
</body></html>
"""


def _baseline_line(base: Record | None) -> str:
    if base is None:
        return " (run with --baseline to compare with a Cluster-Autoscaler node group)"
    return f"; baseline ${summary(base)['dollars']:.4f}"


def write_report(rec: Record, path: str, *, results: list[dict[str, Any]] | None = None,
                 baseline: Record | None = None) -> None:
    results = check(rec, rec.scenario.assertions, baseline) if results is None else results
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(render(rec, results, baseline))

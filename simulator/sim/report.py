"""What a run means: the summary (pending pods and time to Running, nodes, dollars, launches and
terminations, duplicate launches, evictions, PDB violations), the scenario's assertions checked
against it, and the output as text, JSON or a PNG plot (when matplotlib is installed)."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import asdict
from typing import Any

from simulator.sim.facts import clock_text
from simulator.sim.runner import Record
from simulator.sim.scenario import Assertion

SERIES = ("pending_pods", "running_pods", "nodes", "ready_nodes", "instances", "dollars_per_hour", "dollars")
MAPPED_SERIES = ("zone_skew", "nodes_by_pool", "nodes_by_capacity", "nodes_by_type", "nodes_by_pool_capacity")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (0 when there is nothing)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summary(rec: Record) -> dict[str, Any]:
    samples = rec.samples
    end = samples[-1] if samples else None
    pending_seconds = sum(a.pending_pods * (b.t - a.t) for a, b in itertools.pairwise(samples))
    return {
        "virtual_seconds": rec.until,
        "wall_seconds": round(rec.wall_seconds, 2),
        "handler_wall_seconds": round(rec.handler_wall_seconds, 2),
        "handler_wall_by_function": {k: round(v, 2) for k, v in rec.handler_wall_by_function.items()},
        "launches": len(rec.instances),
        "terminations": sum(1 for r in rec.instances if r.terminated_at is not None),
        "duplicate_launches": sum(1 for r in rec.instances if r.duplicate_of),
        "evictions": rec.evictions,
        "pdb_violations": rec.pdb_violations,
        "dollars": round(sum(r.cost(rec.until) for r in rec.instances), 4),
        "max_pending_pods": max((s.pending_pods for s in samples), default=0),
        "pending_pod_seconds": round(pending_seconds, 1),
        "pods_started": len(rec.time_to_running),
        "pods_never_running": rec.never_ran,
        "time_to_running_p50": round(percentile(rec.time_to_running, 50), 1),
        "time_to_running_p95": round(percentile(rec.time_to_running, 95), 1),
        "time_to_running_max": round(max(rec.time_to_running, default=0.0), 1),
        "max_nodes": max((s.nodes for s in samples), default=0),
        "nodes_at_end": end.nodes if end else 0,
        "pending_pods_at_end": end.pending_pods if end else 0,
        "handler_errors": len(rec.handler_errors),
        "interrupted_instances": rec.interrupted,
        "dead_letters": rec.dead_letters,
        "capacity_errors": rec.capacity_errors,
        "interruption_messages": dict(rec.interruption_messages),
        "scheduled_changes": dict(rec.scheduled_changes),
        "kubelet_stops": dict(rec.kubelet_stops),
        "volumes": dict(rec.volumes),
        "max_disrupting_nodes": dict(rec.max_disrupting),
        "images_at_end": dict(rec.images_at_end),
        "launched_types": _count(f"{r.instance.instance_type}" for r in rec.instances if r.instance),
        "launched_capacity_types": _count(r.instance.capacity_type for r in rec.instances if r.instance),
        "invocations": dict(rec.invocations),
        "max_concurrent_invocations": max_concurrent(rec),
        "foreign_sleeps": rec.foreign_sleeps,
        "provisioner_mode": rec.provisioner_mode,
        "schedules": dict(rec.schedules),
        "lambda_timeouts": dict(rec.lambda_timeouts),
        "lambda_dropped": dict(rec.lambda_dropped),
        "watch_batches": rec.watch_batches,
        "events_processed": rec.events_processed,
        "placement": rec.placement,
        "zones": rec.zones,
        "jobs_succeeded": dict(rec.jobs),
        "karpenter_nodes": dict(rec.karpenter_nodes),
    }


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def _sample_value(sample: Any, metric: str) -> float:
    head, *rest = metric.split(".", 1)
    value = getattr(sample, head)
    if rest:
        value = value.get(rest[0], 0) if isinstance(value, dict) else 0
    return float(value)


def is_series(metric: str) -> bool:
    head = metric.split(".", 1)[0]
    return head in SERIES or head in MAPPED_SERIES


def series_value(rec: Record, metric: str, at: float) -> float:
    """A sampled series' value at virtual time ``at`` (the last sample at or before it)."""
    chosen = None
    for s in rec.samples:
        if s.t <= at:
            chosen = s
    if chosen is None:
        raise ValueError(f"no sample at or before {at:g}s")
    return _sample_value(chosen, metric)


_EVENT_KIND = {"launches": "launch", "terminations": "termination", "interruptions": "interruption",
               "evictions": "eviction", "disruptions": "disruption"}


def _window(a: Assertion) -> tuple[float, float]:
    return a.during if a.during is not None else (0.0, float("inf"))


def _check_events(rec: Record, a: Assertion) -> dict[str, Any]:
    start, end = _window(a)
    kind = _EVENT_KIND[a.metric]
    chosen = [(t, what) for t, k, what in rec.events if k == kind and start <= t <= end]
    ok = a.check(len(chosen))
    detail = ""
    if not ok:
        shown = "; ".join(f"{clock_text(t)} {what}" for t, what in chosen[:5])
        detail = f"{len(chosen)} {a.metric}" + (f": {shown}" if shown else "") + (
            f" and {len(chosen) - 5} more" if len(chosen) > 5 else "")
    return {"assertion": a.describe(), "value": len(chosen), "ok": ok, "detail": detail}


def _check_window(rec: Record, a: Assertion) -> dict[str, Any]:
    start, end = _window(a)
    points = [(s.t, _sample_value(s, a.metric)) for s in rec.samples if start <= s.t <= end]
    if not points:
        raise ValueError(f"assertion {a.describe()}: no sample in the window (samples every "
                         f"{rec.scenario.settings.sample_seconds:g}s up to {rec.until:g}s)")
    bad = [(t, v) for t, v in points if not a.check(v)]
    worst = max(v for _, v in points) if a.min is None and (a.never is None or a.never.below is None) \
        else min(v for _, v in points)
    detail = ""
    if bad:
        detail = (f"first at {clock_text(bad[0][0])} ({bad[0][1]:g}), last at {clock_text(bad[-1][0])} "
                  f"({bad[-1][1]:g}); {len(bad)} of {len(points)} samples")
    return {"assertion": a.describe(), "value": bad[0][1] if bad else worst, "ok": not bad, "detail": detail}


def check(rec: Record, assertions: list[Assertion], baseline: Record | None = None) -> list[dict[str, Any]]:
    """Each assertion's result: ``assertion`` (as written), ``value``, ``ok`` and, when it fails, ``detail``
    naming the time and the objects involved."""
    facts = summary(rec)
    out = []
    for a in assertions:
        if a.ratio_to_baseline is not None:
            if baseline is None:
                out.append({"assertion": a.describe(), "value": float("nan"), "ok": False,
                            "detail": "needs the baseline run (autoscaler simulate --baseline)"})
                continue
            ours, theirs = _fact(facts, a.metric), _fact(summary(baseline), a.metric)
            ratio = ours / theirs if theirs else (1.0 if ours == theirs else float("inf"))
            ok = a.check(ratio)
            out.append({"assertion": a.describe(), "value": round(ratio, 4), "ok": ok,
                        "detail": "" if ok else f"ours {ours:g}, baseline {theirs:g}"})
        elif a.metric in _EVENT_KIND and (a.during is not None or a.never is not None):
            out.append(_check_events(rec, a))
        elif a.during is not None or a.never is not None:
            if not is_series(a.metric):
                raise ValueError(f"assertion on {a.metric!r} over a window: use a sampled series "
                                 f"({', '.join(SERIES)}, or {', '.join(f'{m}.<name>' for m in MAPPED_SERIES)}) "
                                 f"or an event count ({', '.join(_EVENT_KIND)})")
            out.append(_check_window(rec, a))
        elif a.at is not None:
            if not is_series(a.metric):
                raise ValueError(f"assertion on {a.metric!r} with 'at': use a sampled series ({', '.join(SERIES)})")
            value = series_value(rec, a.metric, a.at)
            ok = a.check(value)
            out.append({"assertion": a.describe(), "value": value, "ok": ok,
                        "detail": "" if ok else f"{value:g} at {clock_text(min(a.at, rec.until))}"})
        else:
            value = _fact(facts, a.metric)
            out.append({"assertion": a.describe(), "value": value, "ok": a.check(value), "detail": ""})
    return out


def _fact(facts: dict[str, Any], metric: str) -> float:
    """A summary number by name; dotted names reach into mappings (``placement.inflate.default``), and a
    missing leaf of a present mapping is 0 (no pod of that owner in that pool)."""
    head, *rest = metric.split(".")
    if head not in facts:
        numeric = ", ".join(k for k, v in facts.items() if isinstance(v, int | float | dict))
        raise ValueError(f"assertion on unknown metric {metric!r}: use one of {numeric}")
    value: Any = facts[head]
    while rest:
        if not isinstance(value, dict):
            value = None
            break
        # Keys may hold dots themselves (instance types: launched_types.c5.xlarge): the longest match wins.
        n = next((i for i in range(len(rest), 0, -1) if ".".join(rest[:i]) in value), None)
        if n is None:
            value = 0  # a missing leaf of a present mapping: none of those
            break
        value, rest = value[".".join(rest[:n])], rest[n:]
    if not isinstance(value, int | float):
        raise ValueError(f"assertion on {metric!r}: not a number (give the full path, e.g. placement.<owner>.total)")
    return float(value)


def max_concurrent(rec: Record) -> dict[str, int]:
    """Per function, the most of its invocations that ran at once in virtual time (an invocation ending
    when another starts does not overlap it)."""
    most: dict[str, int] = {}
    for i in rec.lambda_invocations:
        at_once = 1 + sum(1 for o in rec.lambda_invocations
                          if o is not i and o.function == i.function and o.started <= i.started < o.ended)
        most[i.function] = max(most.get(i.function, 0), at_once)
    return most


def as_json(rec: Record, results: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "scenario": rec.scenario.name,
        "summary": summary(rec),
        "assertions": results,
        "timeline": [{"t": round(t, 1), "source": src, "text": text} for t, src, text in rec.timeline],
        "samples": [asdict(s) for s in rec.samples],
        "events": [{"t": round(t, 1), "kind": kind, "what": what} for t, kind, what in rec.events],
        "invocations": [{"function": i.function, "queued": round(i.queued_at, 1), "started": round(i.started, 1),
                         "ended": round(i.ended, 1), "timedOut": i.timed_out} for i in rec.lambda_invocations],
        "handlerErrors": rec.handler_errors,
    }


def as_text(rec: Record, results: list[dict[str, Any]]) -> str:
    lines = [f"Scenario {rec.scenario.name}: {rec.scenario.description}".rstrip(": "), "", "Timeline:"]
    lines += [f"  {clock_text(t)}  {src:<14} {text}" for t, src, text in rec.timeline]
    facts = summary(rec)
    lines += ["", "Summary:",
              f"  virtual time {clock_text(rec.until)} from {rec.scenario.start:%Y-%m-%d %H:%M:%S} UTC, "
              f"simulated in {facts['wall_seconds']:.1f} s wall for the run itself "
              f"({facts['events_processed']} events; start-up of moto and the API emulator not counted)",
              f"  pods: {facts['pods_started']} started, time to Running p50 {facts['time_to_running_p50']:g} s, "
              f"p95 {facts['time_to_running_p95']:g} s, max {facts['time_to_running_max']:g} s; "
              f"max pending {facts['max_pending_pods']}, pending pod-seconds {facts['pending_pod_seconds']:g}, "
              f"never Running {facts['pods_never_running']}",
              f"  nodes: max {facts['max_nodes']}, at end {facts['nodes_at_end']}; launches {facts['launches']}, "
              f"terminations {facts['terminations']}, duplicate launches {facts['duplicate_launches']}",
              f"  evictions {facts['evictions']}, PDB violations {facts['pdb_violations']}, "
              f"dollars spent ${facts['dollars']:.4f}; spot instances interrupted {facts['interrupted_instances']}, "
              f"messages dead-lettered {facts['dead_letters']}, capacity errors {facts['capacity_errors']}",
              f"  launched: {', '.join(f'{n} x {t}' for t, n in sorted(facts['launched_types'].items())) or 'nothing'}",
              f"  provisioner {facts['provisioner_mode']} mode"
              + (f" ({facts['watch_batches']} watch batches)" if facts["provisioner_mode"] != "scheduled" else "")
              + f"; invocations {facts['invocations']}, handler errors {facts['handler_errors']}"
              + (f"; at most {facts['max_concurrent_invocations']['interruption']} interruption invocation(s) at once"
                 if "interruption" in facts["max_concurrent_invocations"] else "")]
    if facts["schedules"]:
        lines.append(f"  schedules: provisioner {facts['schedules'].get('provisioner')}, disruption "
                     f"{facts['schedules'].get('disruption')}; timeouts {facts['lambda_timeouts'] or 'none'}, "
                     f"async events dropped after the maximum event age {facts['lambda_dropped'] or 'none'}")
    if rec.scheduled_changes.get("named"):
        c = rec.scheduled_changes
        lines.append(f"  AWS Health scheduled changes: {c['named']} instance(s) named, {c['movedBeforeStart']} moved "
                     f"before the start, {c['retiredByEc2']} retired by EC2 while running")
    if rec.kubelet_stops.get("stopped"):
        k = rec.kubelet_stops
        lines.append(f"  kubelets stopped {k['stopped']:g}, nodes repaired {k['repaired']:g} "
                     f"({k['secondsToRepairMin']:g}-{k['secondsToRepairMax']:g} s after the stop)")
    if rec.max_disrupting:
        lines.append("  most nodes disrupted at once: "
                     + ", ".join(f"{pool} {n}" for pool, n in sorted(rec.max_disrupting.items())))
    if rec.images_at_end:
        lines.append(f"  instances at the end on the newest AMI {rec.images_at_end['newest']}, "
                     f"on older ones {rec.images_at_end['older']}")
    for owner, where in sorted(rec.placement.items()):
        spread = ", ".join(f"{pool} {n}" for pool, n in sorted(where.items()) if pool != "total")
        zones = ", ".join(f"{z} {n}" for z, n in sorted(rec.zones.get(owner, {}).items()))
        lines.append(f"  running at end: {owner} {where['total']} ({spread}; {zones})")
    for err in rec.handler_errors[:5]:
        lines.append(f"    {err}")
    if results:
        lines += ["", "Assertions:"]
        lines += [f"  [{'ok' if r['ok'] else 'FAIL'}] {r['assertion']} (got {r['value']:g})"
                  + (f": {r['detail']}" if r.get("detail") else "") for r in results]
    return "\n".join(lines)


def ratios(ours: Record, base: Record) -> dict[str, float | None]:
    """Ours over the baseline's: below 1 is better for us (None when the baseline's is 0)."""
    a, b = summary(ours), summary(base)
    out: dict[str, float | None] = {}
    for key in ("dollars", "pending_pod_seconds", "time_to_running_p95", "max_nodes"):
        out[key] = round(a[key] / b[key], 3) if b[key] else None
    return out


def baseline_text(ours: Record, base: Record) -> str:
    a, b, r = summary(ours), summary(base), ratios(ours, base)
    ca = base.scenario.baseline
    lines = [f"Baseline (Cluster Autoscaler: an ASG per NodePool, zone, family, size ({', '.join(ca.sizes)}) and "
             f"capacity type, {ca.expander} expander, {ca.scan_seconds:g} s scan, scale-down after "
             f"{ca.unneeded_seconds / 60:g} min below {ca.utilization:.0%}):"]
    lines += [f"  {clock_text(t)}  {src:<18} {text}" for t, src, text in base.timeline if src == "cluster-autoscaler"]
    for key, label in (("dollars", "dollars spent"), ("pending_pod_seconds", "pending pod-seconds"),
                       ("time_to_running_p95", "time to Running p95 (s)"), ("max_nodes", "max nodes")):
        ratio = "n/a" if r[key] is None else f"{r[key]:.2f}"
        lines.append(f"  {label:<26} ours {a[key]:>10g}   baseline {b[key]:>10g}   ratio {ratio}")
    lines.append(f"  baseline PDB violations {b['pdb_violations']}, pods never Running {b['pods_never_running']}, "
                 f"pending at end {b['pending_pods_at_end']}")
    return "\n".join(lines)


def plot(rec: Record, path: str, *, baseline: Record | None = None) -> bool:
    """The PNG version of the HTML report's charts: nodes by pool and capacity type (stacked, the baseline's
    nodes dashed), pods, $/hour and cumulative $ (ours and the baseline's), each on its own labelled axis,
    with launch/disruption/interruption/eviction markers and the scenario's steps; legends sit outside the
    data. False without matplotlib (a dev extra, never needed to run a scenario)."""
    try:
        import matplotlib  # noqa: PLC0415 - optional

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return False
    t = [s.t / 60 for s in rec.samples]
    fig, axes = plt.subplots(4, 1, sharex=True, figsize=(12, 10))
    nodes_ax, pods_ax, hourly_ax, spent_ax = axes
    keys = sorted({k for s in rec.samples for k in s.nodes_by_pool_capacity})
    if keys:
        nodes_ax.stackplot(t, *[[s.nodes_by_pool_capacity.get(k, 0) for s in rec.samples] for k in keys],
                           labels=keys, step="post", alpha=0.6)
    if baseline is not None:
        nodes_ax.step([s.t / 60 for s in baseline.samples], [s.nodes for s in baseline.samples], where="post",
                      color="black", linestyle="--", label="baseline nodes")
    nodes_ax.set_ylabel("nodes")
    pods_ax.step(t, [s.pending_pods for s in rec.samples], where="post", color="tab:red", label="pending pods")
    pods_ax.step(t, [s.running_pods for s in rec.samples], where="post", color="tab:blue", label="running pods")
    pods_ax.set_ylabel("pods")
    hourly_ax.step(t, [s.dollars_per_hour for s in rec.samples], where="post", color="tab:green", label="ours $/h")
    spent_ax.plot(t, [s.dollars for s in rec.samples], color="tab:green", label="ours $ spent")
    if baseline is not None:
        bt = [s.t / 60 for s in baseline.samples]
        hourly_ax.step(bt, [s.dollars_per_hour for s in baseline.samples], where="post", color="black",
                       linestyle="--", label="baseline $/h")
        spent_ax.plot(bt, [s.dollars for s in baseline.samples], color="black", linestyle="--",
                      label="baseline $ spent")
    hourly_ax.set_ylabel("$ / hour")
    spent_ax.set_ylabel("$ spent")
    spent_ax.set_xlabel("minutes")
    colors = {"launch": "tab:green", "disruption": "tab:purple", "interruption": "tab:red",
              "eviction": "tab:orange"}
    for kind, color in colors.items():
        times = [when / 60 for when, k, _ in rec.events if k == kind]
        if times:
            pods_ax.plot(times, [0] * len(times), linestyle="none", marker="v", color=color, markersize=7,
                         label=f"{kind.replace('launch', 'launche')}s ({len(times)})", clip_on=False)
    for when, source, text in rec.timeline:
        if source == "scenario":
            for ax in axes:
                ax.axvline(when / 60, color="grey", linestyle=":", linewidth=1)
            nodes_ax.text(when / 60, 1.02, text[:40], transform=nodes_ax.get_xaxis_transform(), rotation=30,
                          fontsize=7, va="bottom", ha="left", color="dimgrey")
    for ax in axes:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        ax.set_ylim(bottom=0)
    fig.suptitle(f"Scenario {rec.scenario.name}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


WALL_CLOCK_FIELDS = ("wall_seconds", "handler_wall_by_function", "handler_wall_seconds")


def replay_json(rec: Record, results: list[dict[str, Any]]) -> str:
    """The whole run (timeline, samples, summary, assertions) as canonical JSON, less the fields that measure
    the machine rather than the simulation (wall seconds): two runs of one scenario give the same bytes."""
    out = as_json(rec, results)
    for name in WALL_CLOCK_FIELDS:
        out.get("summary", {}).pop(name, None)
    return json.dumps(out, sort_keys=True, default=str)

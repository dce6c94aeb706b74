"""The Lambda functions' platform limits the stack sets, as plain data: reserved concurrency per function
and the maximum age of a queued asynchronous event for the scheduled ones. ``infra/functions.py`` builds
the functions from them and the simulator (``simulator/sim/runner.py``) runs its virtual Lambda platform
with them, so both use the same numbers. Importing this module loads no CDK (no jsii process)."""

from __future__ import annotations

# Reserved concurrency (None: unreserved, the account's pool). The provisioner and disruption run one at a
# time: their decisions assume a stable view of the cluster. The watcher's two let one run start watching
# before the previous one stops. The interruption function scales with its SQS event source instead.
RESERVED_CONCURRENCY: dict[str, int | None] = {"provisioner": 1, "interruption": None, "disruption": 1,
                                               "watcher": 2}
# A scheduled (or woken) run that waited behind the previous one this long is dropped: the next tick comes
# anyway, and stale ticks must not queue up. The interruption function is fed by SQS, not the async queue.
MAX_EVENT_AGE_SECONDS = 60
SCHEDULED_FUNCTIONS = frozenset({"provisioner", "disruption", "watcher"})

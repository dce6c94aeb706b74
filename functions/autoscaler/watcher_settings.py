"""The watcher function's settings, passed by the stack as environment variables (``infra/functions.py``)
and read by ``handlers/watcher.py``. Pure and tiny on purpose: the watcher imports neither pydantic nor the
cluster file, so its 128 MB cold start stays short. Names of the variables live here, once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autoscaler.domain.batching import BATCH_IDLE_SECONDS, BATCH_MAX_SECONDS

ENV_CLUSTER_NAME = "AUTOSCALER_CLUSTER_NAME"
ENV_PROVISIONER_FUNCTION = "AUTOSCALER_PROVISIONER_FUNCTION"  # the same variable the other functions read
ENV_BATCH_IDLE = "AUTOSCALER_BATCH_IDLE_SECONDS"
ENV_BATCH_MAX = "AUTOSCALER_BATCH_MAX_SECONDS"
ENV_REGION = "AWS_REGION"  # set by Lambda itself

# Karpenter's batching window, unless the stack sets the variables above.
DEFAULT_BATCH_IDLE = BATCH_IDLE_SECONDS
DEFAULT_BATCH_MAX = BATCH_MAX_SECONDS
# The schedule starts one invocation per period; each runs this much longer, so the next is watching
# before the previous stops. At the watcher's 128 MB (0.072 of a vCPU) a cold start's imports alone take
# ~5 s (0.34 s of import CPU, benchmarks/bundle.py), then the EKS token and the first list's TLS handshake
# (~1-2 s more): 12 s covers that with ~1.7x margin, for ~$0.07 a month more than 3 s (docs/cost.md).
OVERLAP_SECONDS = 12
# Stop this long before the Lambda timeout: the last batch's wake-up and the log line still fit.
END_RESERVE_SECONDS = 3.0


@dataclass(frozen=True)
class WatcherEnv:
    cluster_name: str
    region: str
    provisioner_function: str
    batch_idle: float = DEFAULT_BATCH_IDLE
    batch_max: float = DEFAULT_BATCH_MAX

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> WatcherEnv:
        """The settings, or ValueError naming each missing or malformed variable and what to set."""
        problems = [f"{name} is not set: the stack sets it (infra/functions.py); set it by hand only for a "
                    "local run" for name in (ENV_CLUSTER_NAME, ENV_REGION, ENV_PROVISIONER_FUNCTION)
                    if not env.get(name)]
        seconds: dict[str, float] = {}
        for name, default in ((ENV_BATCH_IDLE, DEFAULT_BATCH_IDLE), (ENV_BATCH_MAX, DEFAULT_BATCH_MAX)):
            raw = env.get(name, "")
            try:
                seconds[name] = float(raw) if raw else default
            except ValueError:
                problems.append(f"{name}={raw!r} is not a number of seconds; write e.g. {default}")
                continue
            if not 0 < seconds[name] <= 60:
                problems.append(f"{name}={raw!r} must be more than 0 and at most 60 seconds")
        if problems:
            raise ValueError("watcher settings: " + "; ".join(problems))
        return cls(cluster_name=env[ENV_CLUSTER_NAME], region=env[ENV_REGION],
                   provisioner_function=env[ENV_PROVISIONER_FUNCTION],
                   batch_idle=seconds[ENV_BATCH_IDLE], batch_max=seconds[ENV_BATCH_MAX])

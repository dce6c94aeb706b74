"""Auto Scaling lifecycle actions: ``CompleteLifecycleAction`` once a node of an Auto Scaling group (a
managed node group, a self-managed group migrating off the Cluster Autoscaler) is drained, and
``RecordLifecycleActionHeartbeat`` while its drain is retried. Implements
``autoscaler.app.ports.LifecycleHooks``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from autoscaler.adapters.aws._calls import Caller
from autoscaler.app.ports import CloudError

if TYPE_CHECKING:
    from autoscaler.app.ports import LifecycleHooks
    from autoscaler.domain.interruption import LifecycleAction


def _inactive(exc: CloudError) -> bool:
    # Auto Scaling answers ValidationError "No active Lifecycle Action found with instance ID ..." once the
    # action was completed or its heartbeat timeout ran out: nothing is left to do.
    return exc.code == "ValidationError" and "No active Lifecycle Action" in str(exc)


class AsgLifecycleHooks:
    def __init__(self, autoscaling_client: Any) -> None:
        self._asg = Caller(autoscaling_client)

    def _params(self, action: LifecycleAction) -> dict[str, str]:
        return {"LifecycleHookName": action.hook, "AutoScalingGroupName": action.group,
                "LifecycleActionToken": action.token, "InstanceId": action.instance_id}

    def complete(self, action: LifecycleAction, *, result: Literal["CONTINUE", "ABANDON"] = "CONTINUE") -> bool:
        try:
            self._asg("complete_lifecycle_action", expected_errors=("ValidationError",),
                      LifecycleActionResult=result, **self._params(action))
        except CloudError as exc:
            if _inactive(exc):
                return False
            raise
        return True

    def heartbeat(self, action: LifecycleAction) -> bool:
        try:
            self._asg("record_lifecycle_action_heartbeat", expected_errors=("ValidationError",),
                      **self._params(action))
        except CloudError as exc:
            if _inactive(exc):
                return False
            raise
        return True


if TYPE_CHECKING:
    def _implements_port(h: AsgLifecycleHooks) -> LifecycleHooks:
        return h

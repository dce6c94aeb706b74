"""moto's gap in security groups, closed at the boto3 boundary: EC2 gives a CreateFleet instance its launch
template's ``SecurityGroupIds`` (DescribeInstances lists them under ``SecurityGroups``); moto leaves it in
the VPC's default group (in-process: an empty ``SecurityGroups``; as a server: the default group). After
each CreateFleet the new instances get their templates' groups through ``ModifyInstanceAttribute``, so
drift (docs/disruption.md) judges what EC2 would report. Installed on a boto3 Session's or a client's
event emitter, like ``ClientTokens``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_SENT = "simulator.ec2_groups.params"  # the CreateFleet parameters, in that request's botocore context


def install_launch_template_groups(events: Any, ec2: Callable[[], Any]) -> None:
    """Register on ``events`` (``session.events`` or ``client.meta.events``); ``ec2`` gives the client the
    hook calls EC2 with (made lazily, so a session's hook never runs inside its own client's creation)."""

    def remember(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        # Kept in the request's own context: the provisioner launches groups on several threads at once,
        # and one shared "last request" would hand one call's templates to another call's instances.
        context[_SENT] = params

    def apply(parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        made = [iid for fleet in parsed.get("Instances", ()) for iid in fleet.get("InstanceIds", ())]
        if not made:
            return
        client = ec2()
        groups: set[str] = set()
        for cfg in (context.get(_SENT) or {}).get("LaunchTemplateConfigs", ()):
            spec = cfg["LaunchTemplateSpecification"]
            [version] = client.describe_launch_template_versions(
                LaunchTemplateId=spec["LaunchTemplateId"], Versions=[spec.get("Version", "$Latest")],
            )["LaunchTemplateVersions"]
            groups.update(version["LaunchTemplateData"].get("SecurityGroupIds", ()))
        if groups:
            for iid in made:
                client.modify_instance_attribute(InstanceId=iid, Groups=sorted(groups))

    events.register("before-parameter-build.ec2.CreateFleet", remember)
    events.register("after-call.ec2.CreateFleet", apply)

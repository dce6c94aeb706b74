"""A world for the interruption handler tests: moto EC2 (in-process) with real instances tagged as ours
or not, the Kubernetes API emulator with their nodes and pods, a runtime wired to both, and the
provisioner's asynchronous invoke captured through botocore's event system.

moto serves Auto Scaling but not CompleteLifecycleAction / RecordLifecycleActionHeartbeat:
``LifecycleStandIn`` answers them at botocore's ``before-call`` hook as Auto Scaling does.

moto's Lambda would need Docker to run the provisioner, so the invoke is answered at botocore's
``before-call`` hook (HTTP 202, as Lambda answers an ``Event`` invoke) after the real request
parameters were built and recorded: the payload checked is the one that would go on the wire.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3

from autoscaler.adapters.clock import SystemClock
from autoscaler.config import ENV_PROVISIONER_FUNCTION, ClusterConfig, load_cluster_config
from autoscaler.domain.ownership import launch_tags
from autoscaler.handlers.runtime import ENV_KUBE_ENDPOINT, Runtime, build_runtime, set_runtime
from autoscaler.metrics_catalog import RecordingSink
from simulator.kube_api import KubeApiServer
from simulator.local import LambdaContext
from tests import kube_objects as ko
from tests.adapters.aws.helpers import builtin_images
from tests.events import load_event

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "clusters" / "demo.yaml"
REGION = "us-west-2"
PROVISIONER = "eks-autoscaler-demo-provisioner"
FUNCTION = "eks-autoscaler-demo-interruption"


class _Accepted:
    status_code = 202
    headers: dict[str, str] = {}
    content = b""


class _Refused(_Accepted):
    status_code = 404


class _Throttled(_Accepted):
    status_code = 429


@dataclass
class InvokeRecorder:
    """Records Invoke parameters and answers like Lambda does for InvocationType=Event."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    fail_with: str | None = None  # an error code to answer with instead (HTTP 404, not retried by botocore)

    def install(self, client: Any) -> InvokeRecorder:
        client.meta.events.register("before-parameter-build.lambda.Invoke", self._record)
        client.meta.events.register("before-call.lambda.Invoke", self._answer)
        return self

    def _record(self, params: dict[str, Any], **_: Any) -> None:
        self.calls.append({**params, "Payload": json.loads(params["Payload"])})

    def _answer(self, **_: Any) -> tuple[Any, dict[str, Any]]:
        if self.fail_with == "TooManyRequestsException":
            return _Throttled(), {"Error": {"Code": self.fail_with, "Message": "Rate exceeded"},
                                  "ResponseMetadata": {"HTTPStatusCode": 429}}
        if self.fail_with:
            return _Refused(), {"Error": {"Code": self.fail_with, "Message": "Function not found"},
                                "ResponseMetadata": {"HTTPStatusCode": 404}}
        return _Accepted(), {"StatusCode": 202}

    @property
    def payloads(self) -> list[dict[str, Any]]:
        return [c["Payload"] for c in self.calls]


class _AsgResponse:
    def __init__(self, status: int) -> None:
        self.status_code, self.headers, self.content = status, {}, b""


class LifecycleStandIn:
    """CompleteLifecycleAction / RecordLifecycleActionHeartbeat as Auto Scaling answers them."""

    def __init__(self, asg: Any) -> None:
        self.asg = asg
        self.completed: list[dict[str, Any]] = []
        self.heartbeats: list[dict[str, Any]] = []
        self._params: dict[str, Any] = {}
        for op in ("CompleteLifecycleAction", "RecordLifecycleActionHeartbeat"):
            asg.meta.events.register(f"provide-client-params.autoscaling.{op}", self._keep)
            asg.meta.events.register(f"before-call.autoscaling.{op}", self._answer)

    def _keep(self, params: dict[str, Any], **_: Any) -> None:
        self._params = dict(params)

    def _answer(self, model: Any, **_: Any) -> tuple[_AsgResponse, dict[str, Any]]:
        p = self._params
        try:
            hooks = self.asg.describe_lifecycle_hooks(
                AutoScalingGroupName=str(p["AutoScalingGroupName"]))["LifecycleHooks"]
        except Exception:  # no such group: Auto Scaling says the same as for a missing hook
            hooks = []
        done = any(c["InstanceId"] == p["InstanceId"] for c in self.completed)
        if not any(h["LifecycleHookName"] == p["LifecycleHookName"] for h in hooks) or done:
            return _AsgResponse(400), {"Error": {"Code": "ValidationError", "Message": (
                f"No active Lifecycle Action found with instance ID {p['InstanceId']}")},
                "ResponseMetadata": {"HTTPStatusCode": 400}}
        (self.completed if model.name == "CompleteLifecycleAction" else self.heartbeats).append(p)
        return _AsgResponse(200), {"ResponseMetadata": {"HTTPStatusCode": 200}}



def demo_config(**interruption: str) -> ClusterConfig:
    config = load_cluster_config(DEMO)
    if interruption:
        config = config.model_copy(update={"interruption": config.interruption.model_copy(update=interruption)})
    return config


@dataclass
class World:
    kube: KubeApiServer
    rt: Runtime
    ec2: Any
    invokes: InvokeRecorder
    sink: RecordingSink
    image: str
    lifecycle: LifecycleStandIn

    @classmethod
    def create(cls, kube: KubeApiServer, config: ClusterConfig | None = None) -> World:
        sink = RecordingSink()
        rt = build_runtime(config=config or demo_config(),
                           environ={ENV_KUBE_ENDPOINT: kube.url, ENV_PROVISIONER_FUNCTION: PROVISIONER},
                           session=boto3.Session(region_name=REGION), clock=SystemClock(), sink=sink)
        invokes = InvokeRecorder().install(rt.client("lambda"))
        ec2 = rt.client("ec2")
        set_runtime(rt)
        return cls(kube=kube, rt=rt, ec2=ec2, invokes=invokes, sink=sink, image=builtin_images(ec2)["amd64"],
                   lifecycle=LifecycleStandIn(rt.client("autoscaling")))

    # ----- EC2 ---------------------------------------------------------------------------------
    def launch(self, *, owned: bool = True, instance_type: str = "m5.large", zone: str = "us-west-2a") -> str:
        tags = launch_tags(cluster_name=self.rt.config.cluster_name, node_pool="default", node_class="default",
                           claim_id=f"default-{uuid.uuid4().hex[:8]}") if owned else {"Name": "someone-else"}
        reservation = self.ec2.run_instances(
            ImageId=self.image, InstanceType=instance_type, MinCount=1, MaxCount=1,
            Placement={"AvailabilityZone": zone},
            TagSpecifications=[{"ResourceType": "instance",
                                "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}])
        return str(reservation["Instances"][0]["InstanceId"])

    def state(self, instance_id: str) -> str:
        res = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        return str(res[0]["Instances"][0]["State"]["Name"])

    # ----- Kubernetes --------------------------------------------------------------------------
    def add_node(self, name: str, *, owned: bool = True, capacity_type: str = "spot",
                 instance_type: str = "m5.large", zone: str = "us-west-2a") -> str:
        iid = self.launch(owned=owned, instance_type=instance_type, zone=zone)
        obj = ko.node(name, labels={"node.kubernetes.io/instance-type": instance_type,
                                    "topology.kubernetes.io/zone": zone, "karpenter.sh/capacity-type": capacity_type})
        obj["spec"]["providerID"] = f"aws:///{zone}/{iid}"
        self.kube.store.create("nodes", obj)
        return iid

    def add_pod(self, name: str, node: str, **kwargs: Any) -> None:
        kwargs.setdefault("ready", True)
        self.kube.store.create("pods", ko.pod(name, node=node, **kwargs), namespace=kwargs.get("namespace", "default"))

    def node(self, name: str) -> dict[str, Any] | None:
        if not self.kube.store.exists("nodes", None, name):
            return None
        return self.kube.store.get("nodes", None, name)

    def pods_on(self, node: str) -> list[str]:
        return sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}"
                      for p in self.kube.store.objects("pods") if (p.get("spec") or {}).get("nodeName") == node)

    def evictions(self) -> list[str]:
        """Pods whose eviction the API server was asked for, in order (first request per pod)."""
        out: list[str] = []
        for method, path in self.kube.store.requests:
            if method == "POST" and path.endswith("/eviction"):
                parts = path.split("/")
                key = f"{parts[parts.index('namespaces') + 1]}/{parts[parts.index('pods') + 1]}"
                if key not in out:
                    out.append(key)
        return out

    def node_events(self, node: str) -> list[str]:
        return [e.get("reason", "") for e in self.kube.store.objects("events")
                if (e.get("involvedObject") or {}).get("name") == node]

    # ----- the handler -------------------------------------------------------------------------
    def run(self, *bodies: str | dict[str, Any], message_ids: list[str] | None = None,
            remaining_ms: int = 60_000) -> dict[str, Any]:
        from autoscaler.handlers.interruption import handler

        ids = message_ids or [str(uuid.uuid4()) for _ in bodies]
        records = [sqs_record(b if isinstance(b, str) else json.dumps(b), message_id=m)
                   for b, m in zip(bodies, ids, strict=True)]
        context = LambdaContext(function_name=FUNCTION, remaining_ms=remaining_ms)
        result: dict[str, Any] = handler({"Records": records}, context)
        return result


def sqs_record(body: str, *, message_id: str) -> dict[str, Any]:
    return {
        "messageId": message_id, "receiptHandle": f"handle-{message_id}", "body": body,
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1714564800000",
                       "SenderId": "AIDAEXAMPLE", "ApproximateFirstReceiveTimestamp": "1714564800001"},
        "messageAttributes": {}, "md5OfBody": "0" * 32, "eventSource": "aws:sqs",
        "eventSourceArn": f"arn:aws:sqs:{REGION}:123456789012:interruption", "awsRegion": REGION,
    }


def event_for(name: str, *instance_ids: str, event_id: str | None = None, **detail: Any) -> dict[str, Any]:
    """A sample event retargeted at real instance ids (and optionally a new id / detail fields)."""
    ev = load_event(name)
    # Now, so event-to-cordon figures and the spot two-minute deadline are meaningful.
    ev["time"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if event_id:
        ev["id"] = event_id
    if instance_ids:
        if "instance-id" in ev["detail"]:
            ev["detail"]["instance-id"] = instance_ids[0]
            ev["resources"] = [f"arn:aws:ec2:{REGION}:123456789012:instance/{instance_ids[0]}"]
        if "EC2InstanceId" in ev["detail"]:
            ev["detail"]["EC2InstanceId"] = instance_ids[0]
        if "affectedEntities" in ev["detail"]:
            ev["detail"]["affectedEntities"] = [{"entityValue": i} for i in instance_ids]
            ev["resources"] = list(instance_ids)
    ev["detail"].update(detail)
    return ev

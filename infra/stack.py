"""The per-cluster autoscaler stack. Constructs are split by concern (queue and rules, identity, functions,
monitoring) and composed here; the stack adds only the outputs an operator needs after deploying."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from autoscaler.config import ClusterConfig
from infra.bundling import lambda_code
from infra.claims_table import ClaimsTable
from infra.functions import Functions
from infra.identity import Identity
from infra.interruption_queue import InterruptionQueue
from infra.monitoring import Monitoring
from infra.nag import apply_suppressions


class AutoscalerStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: ClusterConfig, skip_bundling: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        self.cluster_name = config.cluster_name
        self.interruption = InterruptionQueue(
            self, "Interruption",
            # SQS requires the visibility timeout to cover the consuming function's timeout.
            visibility_timeout=cdk.Duration.seconds(config.interruption.timeout_seconds + 10))
        self.queue = self.interruption.queue
        self.identity = Identity(self, "Identity", config=config)
        self.claims = ClaimsTable(self, "NodeClaims", cluster_name=config.cluster_name)
        self.functions = Functions(self, "Functions", config=config, identity=self.identity,
                                   code=lambda_code(config, skip_bundling=skip_bundling), queue=self.queue,
                                   claims=self.claims)
        self.monitoring = Monitoring(self, "Monitoring", config=config, functions=self.functions.all,
                                     queue=self.queue, dead_letter_queue=self.interruption.dead_letter_queue)
        if skip_bundling:
            cdk.Annotations.of(self).add_info(
                "Lambda asset not bundled (skipBundling=true): this template is for review, not for deploying.")
        for key, value in config.tags.items():
            cdk.Tags.of(self).add(key, value)
        self._outputs()
        apply_suppressions(self, node_role_created=config.node_role.create)

    def _outputs(self) -> None:
        cdk.CfnOutput(self, "InterruptionQueueArn", value=self.queue.queue_arn)
        for name, function in self.functions.all.items():
            cdk.CfnOutput(self, f"{name.capitalize()}FunctionName", value=function.function_name)
        cdk.CfnOutput(self, "DashboardUrl", value=self.monitoring.dashboard_url())
        cdk.CfnOutput(self, "NodeRoleArn", value=self.identity.node_role.role_arn)
        cdk.CfnOutput(self, "NodeClaimsTable", value=self.claims.table.table_name,
                      description="The provisioner's durable record of launches (docs/provisioner.md)")
        cdk.CfnOutput(self, "InstanceProfileName", value=self.identity.instance_profile.instance_profile_name)
        cdk.CfnOutput(self, "ApplyRbacCommand", value=self.identity.rbac_command(),
                      description="Run once after the first deploy: lets the functions' Kubernetes group do "
                                  "exactly what the autoscaler needs")

"""The node-claims table: the provisioner's durable record of launches (``adapters/aws/claims.py``).

One item per node claim (written before CreateFleet, deleted once its node registers) plus the launch
lease, under the cluster's name as partition key. On-demand billing (a few writes per launch), TTL on
``expiresAt`` so a forgotten claim disappears by itself, destroyed with the stack (claims are transient:
the instances carry their own tags)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from constructs import Construct

from autoscaler.adapters.aws.claims import PARTITION_KEY, SORT_KEY, TTL_ATTRIBUTE

# Exactly what DynamoClaimStore calls (TransactWriteItems is authorised per contained PutItem).
CLAIM_ACTIONS = ("dynamodb:Query", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem")


class ClaimsTable(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, cluster_name: str) -> None:
        super().__init__(scope, construct_id)
        self.cluster_name = cluster_name
        self.table = dynamodb.Table(
            self, "Table",
            partition_key=dynamodb.Attribute(name=PARTITION_KEY, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=SORT_KEY, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute=TTL_ATTRIBUTE,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )

    def grant(self, role: iam.IRole) -> None:
        """Read and write this cluster's items only (``dynamodb:LeadingKeys``: the cluster name, for the lease and
        claims written before the shards, and ``<cluster>#<shard>`` for the claims)."""
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="RecordNodeClaims", actions=list(CLAIM_ACTIONS), resources=[self.table.table_arn],
            conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [self.cluster_name,
                                                                            f"{self.cluster_name}#*"]}}))

"""The CDK app that deploys the autoscaler for one EKS cluster (``cdk deploy -c cluster=NAME``)."""

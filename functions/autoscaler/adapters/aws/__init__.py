"""AWS adapters (EC2, SSM, Pricing, SQS, Lambda) built on injected boto3 clients."""

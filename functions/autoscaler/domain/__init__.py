"""Pure domain logic: models, requirements, allocatable, scheduling, disruption and interruption rules.

Nothing here performs I/O or imports boto3, botocore, kubernetes or Powertools (checked by
import-linter). Time comes from an injected clock.
"""

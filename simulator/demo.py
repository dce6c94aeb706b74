"""``make demo``: run the autoscaler locally on the getting-started ``inflate`` scenario.

Filled in as the provisioner lands; for now it shows the offline planner's entry point.
"""

from __future__ import annotations

import sys

from autoscaler.cli import main

if __name__ == "__main__":
    sys.exit(main(["--help"]) if len(sys.argv) == 1 else main(sys.argv[1:]))

"""Local stand-ins used by tests, benchmarks and ``make demo``: the Kubernetes API emulator and the
local cluster simulation. Never shipped to Lambda."""

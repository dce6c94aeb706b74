"""Application services: orchestrate one provisioner, interruption or disruption pass through the ports
(``ports.py``); the node-state record (``node_state.py``) is the one place node annotations are read and
written."""

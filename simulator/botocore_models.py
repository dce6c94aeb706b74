"""One botocore service-model loader per process, for everything that builds many boto3 sessions locally (the
test process, the simulator behind ``make demo`` and the scenarios). Imports botocore only, never moto: the
test process installs it before moto's models are first imported."""

from __future__ import annotations

import botocore.loaders
import botocore.session

_LOADERS: dict[str | None, botocore.loaders.Loader] = {}
_CREATE = botocore.loaders.create_loader


def _shared_loader(search_path_string: str | None = None) -> botocore.loaders.Loader:
    if search_path_string not in _LOADERS:
        _LOADERS[search_path_string] = _CREATE(search_path_string)
    return _LOADERS[search_path_string]


def one_loader_per_process() -> None:
    """Every botocore session made after this reads the service models through one loader per search path.
    Each fresh ``boto3.Session`` (one per runtime: hundreds per test worker, one per simulation run) would
    otherwise parse the JSON models again for every client it makes (EC2's alone takes a third of a second).
    A Lambda container builds its session once, so sharing the loader, whose cache holds parsed models that
    nothing modifies, is what a function sees; what is sent and answered is unchanged. Idempotent."""
    botocore.session.create_loader = _shared_loader

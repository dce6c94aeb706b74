"""The ``autoscaler`` console script: offline planning and operator tools.

Sub-commands are registered in ``COMMANDS``; each gets its own argparse sub-parser.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from autoscaler import __version__

Command = Callable[[argparse.Namespace], int]
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], Command]]] = {}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autoscaler",
        description="Serverless node autoscaler for Amazon EKS: plan node launches offline, "
        "inspect configuration, and run the Lambda logic locally.",
    )
    parser.add_argument("--version", action="version", version=f"autoscaler {__version__}")
    subs = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, register) in sorted(COMMANDS.items()):
        sub = subs.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(run=register(sub))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Command | None = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

"""Entry point of the ``opgraph`` command (also ``python -m opgraph.cli``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import bench, demo, info

SUBCOMMANDS = (info, demo, bench)  # each module: register(subparsers), run(args) -> exit status

DESCRIPTION = """\
opgraph: a graph compiler and runtime for machine learning on NVIDIA GPUs and CPUs.
Run `opgraph COMMAND --help` for the options and an example of each command."""

EPILOG = """\
examples:
  opgraph info                      versions of opgraph, torch, triton, numpy, Python; the devices
  opgraph demo                      compile a small CNN, run it, compare with eager PyTorch
  opgraph demo --device cpu --batch 8 --iters 20
  opgraph demo train                train a small CNN on handwritten digits, save a loss/accuracy plot
  opgraph bench --quick             time models: eager PyTorch vs torch.compile (Inductor) vs opgraph"""


def build_parser() -> argparse.ArgumentParser:
    from opgraph import __version__

    parser = argparse.ArgumentParser(prog="opgraph", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"opgraph {__version__}")
    sub = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the subcommand, return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    from opgraph import OpgraphError

    try:
        status: int = args.run(args)
    except OpgraphError as e:  # a user-facing error: no traceback
        print(f"opgraph {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\nopgraph {args.command}: interrupted", file=sys.stderr)
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())

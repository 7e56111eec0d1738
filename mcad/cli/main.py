"""The ``mcad`` command: one entry point, one subcommand per job.

Why this shape: one subcommand per module (``validate``, ``cluster``, ``run``, ``queue``
and ``explain``, ``wrap``), each with ``add_parser`` and a function to run; the same
entry point is also the kubectl plugin ``kubectl-mcad`` (``mcad.cli.kubectl``). This
module is the boundary where anything unexpected becomes a sentence and an exit status,
never a traceback: 0 success, 1 the input is invalid, 2 the command line is wrong, 70 an
internal error (a bug to report), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version

from mcad.cli import cluster, kubectl, queue, run, validate, wrap

EXIT_USAGE = 2
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog=kubectl.program_name(),
        description="An AppWrapper dispatcher for Kubernetes: queues, quota trees, "
                    "multi-cluster gang placement.",
    )
    parser.add_argument("--version", action="version", version=f"mcad {_version()}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    validate.add_parser(subparsers)
    cluster.add_parser(subparsers)
    run.add_parser(subparsers)
    queue.add_parser(subparsers)
    wrap.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse has printed usage or help already
        return stop.code if isinstance(stop.code, int) else EXIT_USAGE
    command: Callable[[argparse.Namespace], int] | None = getattr(args, "command", None)
    if command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return command(args)
    except KeyboardInterrupt:
        print("mcad: interrupted.", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0  # the reader (e.g. head) has seen enough
    except Exception as err:
        print(f"mcad: internal error ({type(err).__name__}: {err}); this is a bug in mcad, "
              "please report it together with the input that caused it.", file=sys.stderr)
        return EXIT_INTERNAL


def _version() -> str:
    try:
        return version("mcad")
    except PackageNotFoundError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())

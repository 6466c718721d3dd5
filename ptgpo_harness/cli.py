"""The ``ptgpo`` console script: one subcommand per module of :mod:`ptgpo_harness.commands`."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import shlex
import sys

from ptgpo_envs.progress import HF_BARS_ENV, NO_PROGRESS_ENV

#: Subcommand name -> module under ptgpo_harness.commands.
COMMANDS = {
    "algos": "algos",
    "alfworld": "alfworld",
    "bench": "bench",
    "demo": "demo",
    "envs": "envs",
    "evaluate": "evaluate",
    "export": "export",
    "leaderboard": "leaderboard",
    "models": "models",
    "plan": "plan",
    "serve": "serve",
    "show": "show",
    "train": "train",
}


def _tune_threads(argv: list[str]) -> None:
    # Measured here: idle OpenMP threads busy-wait and make 2-thread torch 5-30x slower; keeping freed
    # memory in the process gains ~15 %. Both must be set before torch is imported.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "1000000000")
    os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", "1000000000")
    os.environ.setdefault("MALLOC_TOP_PAD_", "100000000")
    if "--reproducible" in argv:  # the kernels are chosen when torch starts, before the arguments are parsed
        from ptgpo_algos.device import pin_reproducible_kernels

        pin_reproducible_kernels()


def version() -> str:
    """The installed ``ptgpo`` distribution's version, or ``unknown`` when run from a bare source tree."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("ptgpo")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def _one_line_plugin_warnings() -> None:
    """Show a plugin's failure to load, and more ranks than cores, as one line (``ptgpo: warning: ...``),
    without Python's source line."""
    import warnings

    from ptgpo_algos.child_processes import OversubscribedWarning
    from ptgpo_envs.plugins import PluginWarning

    original = warnings.formatwarning

    def format_warning(message, category, filename, lineno, line=None):  # noqa: ANN001 (warnings' signature)
        if issubclass(category, (PluginWarning, OversubscribedWarning)):
            return f"ptgpo: warning: {message}\n"
        return original(message, category, filename, lineno, line)

    warnings.formatwarning = format_warning


def build_parser() -> argparse.ArgumentParser:
    """The ``ptgpo`` argument parser: one subcommand per module of :mod:`ptgpo_harness.commands`."""
    parser = argparse.ArgumentParser(
        prog="ptgpo", description="Train and benchmark LLM agents on multi-turn text environments."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(f"ptgpo_harness.commands.{module_name}")
        command = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        if "--no-progress" not in command._option_string_actions:
            command.add_argument("--no-progress", action="store_true", help="no progress bars")
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):  # `ptgpo models list --no-progress` too
                for nested in action.choices.values():
                    if "--no-progress" not in nested._option_string_actions:
                        # Given only when written, so that it keeps the value the command's own flag set.
                        nested.add_argument("--no-progress", action="store_true", default=argparse.SUPPRESS,
                                            help="no progress bars")
        command.set_defaults(_run=module.run)
    return parser


#: The commands whose interrupted work the same command line continues (``train`` with ``--resume``).
RESUMABLE = ("bench", "train")


def main(argv: list[str] | None = None) -> int:
    """The ``ptgpo`` console script: set up the thread settings, parse ``argv`` and run the subcommand; its
    exit status. Ctrl-C ends it quietly with 130 and, for a resumable command, the line that resumes it;
    an error of the system (a full disk, a folder that cannot be written) is a message naming the file,
    with 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    _tune_threads(argv)
    _one_line_plugin_warnings()
    args = build_parser().parse_args(argv)
    if args.no_progress:  # every bar of this process and of the processes it starts (bench cells)
        os.environ[NO_PROGRESS_ENV] = "1"
    if args.no_progress or not sys.stderr.isatty():
        # Hugging Face's own bars (loading and saving weights) write \r frames too; transformers reads
        # this when it is imported, so a caller that imported it before main() is told directly.
        os.environ[HF_BARS_ENV] = "1"
        if "transformers" in sys.modules:
            sys.modules["transformers"].utils.logging.disable_progress_bar()
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print(f"\nptgpo {args.command}: interrupted{_resume_hint(args.command, argv)}", file=sys.stderr)
        return 130
    except OSError as error:
        print(f"ptgpo {args.command}: {describe_os_error(error)}", file=sys.stderr)
        return 2


def _resume_hint(command: str, argv: list[str]) -> str:
    if command not in RESUMABLE:
        return ""
    line = ["ptgpo", *argv] + (["--resume"] if command == "train" and "--resume" not in argv else [])
    return f"; what was finished is kept, resume with: {shlex.join(line)}"


def describe_os_error(error: OSError) -> str:
    """An ``OSError`` as one line naming the file and what to do where the cause is a common one."""
    where = f"{error.filename}: " if error.filename else ""
    what = error.strerror or str(error) or type(error).__name__
    if error.errno == errno.ENOSPC:
        what += " (free some space, then run the same command again: finished work is kept)"
    elif error.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
        what += " (choose a folder you can write to, or fix its permissions)"
    return where + what


if __name__ == "__main__":
    sys.exit(main())

"""``ptgpo leaderboard``: aggregate one or several results directories into tables (Markdown, CSV, LaTeX, HTML) and
learning-curve plots."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HELP = "aggregate result records into leaderboard tables and learning-curve plots"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ptgpo leaderboard``'s arguments: the results folder, the output folder, the reported results and
    the formats."""
    parser.add_argument(
        "results_dirs", type=Path, nargs="+", metavar="RESULTS_DIR",
        help="directory of <cell>.json result records; several are read as one benchmark",
    )
    parser.add_argument(
        "--out", type=Path, default=None,
        help="output directory (default: RESULTS_DIR/leaderboard; needed with several RESULTS_DIRs)",
    )
    parser.add_argument(
        "--reported",
        default=None,
        metavar="YAML|none",
        help="results reported in papers, shown as a separate table; 'none' leaves it out "
        "(default: leaderboard/reported.yaml shipped with the package)",
    )
    parser.add_argument(
        "--formats", default="md,csv,tex,html,png", help="comma-separated subset of md,csv,tex,html,png"
    )
    parser.add_argument(
        "--decisions-tolerance",
        type=float,
        default=None,
        metavar="FRACTION",
        help="refuse a column whose RL runs spent policy decisions further apart than this fraction "
        "of the smallest (default: 0.02)",
    )
    parser.add_argument(
        "--reference",
        default="expert",
        help="comma-separated methods shown as unranked reference rows, never marked best "
        "(default: expert; '' for none)",
    )


def run(args: argparse.Namespace) -> int:
    """Aggregate a results folder, write the leaderboard files and print the Markdown table; the exit
    status."""
    from leaderboard.aggregate import DECISIONS_TOLERANCE, LeaderboardError, build_leaderboard
    from leaderboard.render import FORMATS, to_markdown, write_outputs
    from leaderboard.reported import DEFAULT_REPORTED, ReportedFileError, load_reported
    from ptgpo_algos.files import check_writable

    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        print(
            f"ptgpo leaderboard: unknown format(s) {unknown}; choose from {','.join(FORMATS)}",
            file=sys.stderr,
        )
        return 2
    missing = [str(folder) for folder in args.results_dirs if not folder.is_dir()]
    if missing:
        print(f"ptgpo leaderboard: results directory {', '.join(missing)} does not exist", file=sys.stderr)
        return 2
    if len(args.results_dirs) > 1 and args.out is None:
        print("ptgpo leaderboard: with several results directories, say where the tables go: --out DIR",
              file=sys.stderr)
        return 2
    out_dir = args.out if args.out is not None else args.results_dirs[0] / "leaderboard"
    try:
        if args.out is None and out_dir.is_symlink():
            # Only a folder given with --out is written wherever it points.
            raise ValueError(f"{str(out_dir)!r} is a symbolic link (to {os.readlink(out_dir)!r}): writing the "
                             "leaderboard through it would replace files outside the results folder; remove the "
                             "link, or give --out")
        check_writable(out_dir, "--out", folder=True)
    except ValueError as error:
        print(f"ptgpo leaderboard: {error}", file=sys.stderr)
        return 2
    reported = None
    if args.reported is None or args.reported.lower() != "none":
        try:
            reported = load_reported(DEFAULT_REPORTED if args.reported is None else Path(args.reported))
        except (OSError, ReportedFileError) as error:
            print(f"ptgpo leaderboard: {error}", file=sys.stderr)
            return 2
    reference = [m.strip() for m in args.reference.split(",") if m.strip()]
    tolerance = DECISIONS_TOLERANCE if args.decisions_tolerance is None else args.decisions_tolerance
    if not tolerance >= 0:  # also refuses NaN
        print(f"ptgpo leaderboard: --decisions-tolerance must be >= 0, got {tolerance}", file=sys.stderr)
        return 2
    try:
        board = build_leaderboard(args.results_dirs, reported, reference, tolerance)
    except LeaderboardError as error:
        print(f"ptgpo leaderboard: {error}", file=sys.stderr)
        return 2
    written = write_outputs(board, out_dir, formats)
    print(to_markdown(board), end="")
    for problem in board.problems:
        print(f"warning: skipped {problem}", file=sys.stderr)
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0

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
        "--keep-short-runs",
        action="store_true",
        help="build the tables although RL runs of an iteration or cost budget stopped before it (a guard "
        "such as run.iterations stopped them): they are listed under the table, and a hypothesis on their "
        "column is read on the learning curves (default: refuse them, naming the files)",
    )
    parser.add_argument(
        "--hypotheses",
        default=None,
        metavar="YAML|none",
        help="preregistered hypotheses to decide (leaderboard/hypotheses.py), written as hypotheses.md/csv; "
        "default: RESULTS_DIR/hypotheses.yaml when it exists; 'none' skips them",
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
    from leaderboard.aggregate import build_leaderboard
    from leaderboard.hypotheses import decide, hypotheses_markdown
    from leaderboard.records import read_records_with_paths
    from leaderboard.render import to_markdown, write_outputs

    try:
        formats, out_dir = _formats(args), _out_dir(args)
        reported, preregistration = _reported(args), _preregistration(args)
        board = build_leaderboard(args.results_dirs, reported, _reference(args), _tolerance(args),
                                  args.keep_short_runs)
        outcomes = None if preregistration is None else decide(
            [item for folder in args.results_dirs for item in read_records_with_paths(folder)[0]], preregistration)
    except (OSError, ValueError) as error:  # every refusal above names the flag or the file
        print(f"ptgpo leaderboard: {error}", file=sys.stderr)
        return 2
    written = write_outputs(board, out_dir, formats)
    written += write_matched_cost(board, out_dir, formats)
    if outcomes is not None:
        written += write_hypotheses(outcomes, preregistration, out_dir, formats)
    print(to_markdown(board), end="")
    if outcomes is not None:
        print("\n" + hypotheses_markdown(outcomes, preregistration), end="")
    for problem in board.problems:
        print(f"warning: skipped {problem}", file=sys.stderr)
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _formats(args: argparse.Namespace) -> list[str]:
    from leaderboard.render import FORMATS

    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise ValueError(f"unknown format(s) {unknown}; choose from {','.join(FORMATS)}")
    return formats


def _out_dir(args: argparse.Namespace) -> Path:
    from ptgpo_algos.files import check_writable

    missing = [str(folder) for folder in args.results_dirs if not folder.is_dir()]
    if missing:
        raise ValueError(f"results directory {', '.join(missing)} does not exist")
    if len(args.results_dirs) > 1 and args.out is None:
        raise ValueError("with several results directories, say where the tables go: --out DIR")
    out_dir = args.out if args.out is not None else args.results_dirs[0] / "leaderboard"
    if args.out is None and out_dir.is_symlink():
        # Only a folder given with --out is written wherever it points.
        raise ValueError(f"{str(out_dir)!r} is a symbolic link (to {os.readlink(out_dir)!r}): writing the "
                         "leaderboard through it would replace files outside the results folder; remove the "
                         "link, or give --out")
    check_writable(out_dir, "--out", folder=True)
    return out_dir


def _reported(args: argparse.Namespace):
    from leaderboard.reported import DEFAULT_REPORTED, load_reported

    if args.reported is not None and args.reported.lower() == "none":
        return None
    return load_reported(DEFAULT_REPORTED if args.reported is None else Path(args.reported))


def _reference(args: argparse.Namespace) -> list[str]:
    return [m.strip() for m in args.reference.split(",") if m.strip()]


def _tolerance(args: argparse.Namespace) -> float:
    from leaderboard.board import DECISIONS_TOLERANCE

    tolerance = DECISIONS_TOLERANCE if args.decisions_tolerance is None else args.decisions_tolerance
    if not tolerance >= 0:  # also refuses NaN
        raise ValueError(f"--decisions-tolerance must be >= 0, got {tolerance}")
    return tolerance


def _preregistration(args: argparse.Namespace):
    """The hypotheses to decide: ``--hypotheses``, else the first results folder's file, else None."""
    from leaderboard.hypotheses import HYPOTHESES_FILE, load_hypotheses

    if args.hypotheses is not None:
        return None if args.hypotheses.lower() == "none" else load_hypotheses(args.hypotheses)
    default = args.results_dirs[0] / HYPOTHESES_FILE
    # Whatever stands under the name is read, or refused by name: a link or a FIFO is not passed over.
    return load_hypotheses(default) if os.path.lexists(default) else None


def write_matched_cost(board, out_dir: Path, formats: list[str]) -> list[Path]:
    """``matched-cost.md`` and ``matched-cost.csv`` (as ``formats`` ask; :mod:`leaderboard.matched`),
    written atomically."""
    from leaderboard.matched import matched_costs, matched_csv, matched_markdown
    from ptgpo_algos.files import atomic_write_text

    wanted = [name for name in ("matched-cost.md", "matched-cost.csv") if name.rsplit(".", 1)[1] in formats]
    found = matched_costs(board) if wanted else []
    for name in wanted:
        atomic_write_text(out_dir / name, (matched_markdown if name.endswith(".md") else matched_csv)(found))
    return [out_dir / name for name in wanted]


def write_hypotheses(outcomes, preregistration, out_dir: Path, formats: list[str]) -> list[Path]:
    """``hypotheses.md`` and ``hypotheses.csv`` (as ``formats`` ask), written atomically."""
    from leaderboard.hypotheses import hypotheses_csv, hypotheses_markdown
    from ptgpo_algos.files import atomic_write_text

    written = []
    for name, text in (("hypotheses.md", lambda: hypotheses_markdown(outcomes, preregistration)),
                       ("hypotheses.csv", lambda: hypotheses_csv(outcomes))):
        if name.rsplit(".", 1)[1] in formats:
            atomic_write_text(out_dir / name, text())
            written.append(out_dir / name)
    return written

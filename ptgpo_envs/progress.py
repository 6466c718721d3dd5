"""Progress bars, one kind for the whole suite: a live bar on a terminal, whole lines in a log file.

Every bar of the suite (training, evaluation, pretraining, benchmark cells, game generation) is made
here. On a terminal it is tqdm's bar; written to a file or a pipe (a cell's ``cell.log``, ``ptgpo train
> log``) it is a line every :data:`LOG_INTERVAL_S` seconds instead of ``\\r`` frames that a log keeps.
``--no-progress`` sets :data:`NO_PROGRESS_ENV`, which silences every bar of the process and of the
processes it starts (a benchmark's cells).
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

__all__ = ["HF_BARS_ENV", "LOG_INTERVAL_S", "NO_PROGRESS_ENV", "progress_bar"]

#: Set to 1 to silence every bar (``--no-progress``); child processes inherit it.
NO_PROGRESS_ENV = "PTGPO_NO_PROGRESS"
#: Set to 1 to silence Hugging Face's bars (transformers' and huggingface_hub's), which cannot write lines.
HF_BARS_ENV = "HF_HUB_DISABLE_PROGRESS_BARS"
#: Seconds between a bar's lines when it is not on a terminal.
LOG_INTERVAL_S = 30.0
#: A bar's line in a log: what tqdm shows beside the bar, the whole postfix included.
LOG_FORMAT = "{desc}: {percentage:3.0f}% {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


class _Lines:
    """A stream that receives tqdm's ``\\r`` frames and writes each non-blank one as a line of its own."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        frame = text.replace("\r", "").strip()
        if frame:
            self.stream.write(frame + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def progress_bar(iterable: Any = None, *, disable: bool = False, **options: Any) -> Any:
    """A tqdm bar (``iterable`` and ``options`` as tqdm takes them), off when ``disable`` or
    :data:`NO_PROGRESS_ENV` says so, and written as lines when standard error is not a terminal."""
    from tqdm.auto import tqdm

    disable = disable or os.environ.get(NO_PROGRESS_ENV) == "1"
    stream = sys.stderr
    if not disable and not (hasattr(stream, "isatty") and stream.isatty()):
        # No bar and no width in a log line, so nothing (the postfix's success figure) is cut off.
        options = {"mininterval": LOG_INTERVAL_S, **options, "file": _Lines(stream), "bar_format": LOG_FORMAT,
                   "ncols": None, "dynamic_ncols": False, "ascii": True}
    return tqdm(iterable, disable=disable, **options)

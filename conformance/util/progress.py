"""Progress on standard error: a rich progress bar on a terminal, one plain line per step otherwise.
Labels and lines can carry what a server sent: control characters and bidi overrides are shown as escapes."""

from __future__ import annotations

import sys
from typing import IO, Any

from conformance.util.markdown_text import visible


class Progress:
    """`advance(label, line)` once per finished step: the bar shows `label`, a log gets `line`."""

    def __init__(self, total: int, title: str, stream: IO[str] | None = None) -> None:
        self.total, self.done = total, 0
        self.stream = stream or sys.stderr
        self.bar: Any = None
        if self.stream.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            self.bar = Bar(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), console=Console(file=self.stream), transient=True)
            self.task = self.bar.add_task(title, total=total)
            self.bar.start()

    def advance(self, label: str, line: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(self.task, advance=1, description=visible(label))
        else:
            print(f"[{self.done}/{self.total}] {visible(line)}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""The command line's two consoles and JSON output, shared by the modules that hold commands.

Tables and results go to stdout (``console``); progress, notes and errors to stderr
(``err_console``). ``--json`` output is written to stdout as one JSON document.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from isobench.report.plaintext import Markup, PlainConsole, plain

# Off a terminal (CI logs, pipes) rich would wrap tables at 80 columns: give them room.
# Plain consoles: a user's label or error text is never read as markup (report/plaintext.py).
console = PlainConsole() if sys.stdout.isatty() else PlainConsole(width=160)
# Notes and errors stay one line each (soft wrap: a long path is not broken where grep would miss it).
err_console = PlainConsole(stderr=True, soft_wrap=True) if sys.stderr.isatty() else \
    PlainConsole(stderr=True, soft_wrap=True, width=160)

#: the --json option of a command that prints a table
JsonOpt = Annotated[bool, typer.Option("--json", help="print the result as JSON on stdout instead of a table")]


def text_of(value: object) -> str:
    """A table cell as plain text: a :class:`Markup` string without its style tags."""
    return plain(value).plain if isinstance(value, Markup) else str(value)


#: what a shell reports for a writer killed by SIGPIPE (128 + 13)
PIPE_CLOSED = 141


def _point_stdout_at_devnull(fd: int) -> None:
    """The reader has gone: later writes, and the flush at exit, go nowhere instead of failing."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), fd)


@contextmanager
def reader_may_leave() -> Iterator[None]:
    """Stdout output that a reader may stop reading (``isobench export DIR | head``): stop quietly
    with the status SIGPIPE gives. Left alone, click turns the broken pipe into exit 1, which a
    pipeline reads as a failure."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        _point_stdout_at_devnull(sys.stdout.fileno())
        raise typer.Exit(PIPE_CLOSED) from None


class _OutlivesItsReader:
    """Stdout for a long command: when its reader closes the pipe, output stops and the work goes on."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.gone = False

    def _reader_gone(self) -> None:
        self.gone = True
        _point_stdout_at_devnull(self._stream.fileno())
        err_console.print("note: stdout's reader closed the pipe; the study goes on without printing, and "
                          "`isobench summary DIR` reads its results", markup=False, highlight=False)

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._reader_gone()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._reader_gone()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def outlive_reader() -> Iterator[None]:
    """``isobench run STUDY | head``: a closed pipe must not end a study mid-way (click would exit 1
    at the next progress line, with cells left to run); progress stops, the study finishes."""
    original, sys.stdout = sys.stdout, _OutlivesItsReader(sys.stdout)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout = original


def print_json(document: Any) -> None:
    """``document`` as JSON on stdout (non-JSON values, such as paths, as strings): an object
    indented; a list with one record per line, which ``grep`` and a reader can follow and which
    json's C encoder writes (the indenting encoder is pure Python: at 20,000 records, seconds)."""
    with reader_may_leave():
        if isinstance(document, list) and document:
            sys.stdout.write("[\n" + ",\n".join(json.dumps(record, default=str) for record in document) + "\n]\n")
        else:
            sys.stdout.write(json.dumps(document, indent=1, default=str) + "\n")

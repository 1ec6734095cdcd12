"""User strings as plain text in every output: the one place that knows each format's syntax.

Labels, names, parameters, error text and stderr tails come from the user (or from a cell
the user wrote) and must show verbatim, never as markup, formulas or code. Each output kind
has one function here; the renderers call it instead of escaping on their own.

- terminal (rich): :class:`PlainConsole` renders every ``str`` as plain text; our own styling is
  a :class:`Markup` built by :func:`markup`, which escapes the values it is given;
- Markdown: :func:`md` (inline text), :func:`md_fence` (a fenced block no text can close),
  :func:`md_table` (a table of text cells);
- CSV: :func:`csv_cell` (no cell starts a spreadsheet formula);
- matplotlib: :data:`MPL_RC` (no ``$…$`` math text);
- HTML: :func:`html_text`;
- one-line errors: :func:`isobench.text.capped_list` (a long list is cut, with how many were left out).
"""

from __future__ import annotations

import html
import re
import string
from typing import Any

from rich.console import Console
from rich.markup import escape as _rich_escape
from rich.text import Text


class Markup(str):
    """A string of isobench's own rich markup. Only :func:`markup` should make one."""


def term(value: object) -> str:
    """``value`` escaped for a rich markup string (brackets and trailing backslashes)."""
    return _rich_escape(str(value))


def markup(template: str, *args: object, **kwargs: object) -> Markup:
    """``template`` (ours, with rich tags and ``{}`` slots) filled with escaped user values.
    (On a plain rich Console ``:emoji:`` codes in values still turn into emoji: use PlainConsole.)"""
    out: list[str] = []
    position = 0
    parts = list(string.Formatter().parse(template))
    for index, (literal, name, spec, _conversion) in enumerate(parts):
        out.append(literal)
        if name is None:
            continue
        if name == "":
            value, position = args[position], position + 1
        else:
            value = args[int(name)] if name.isdigit() else kwargs[name]
        text = term(format(value, spec or ""))
        following = parts[index + 1][0] if index + 1 < len(parts) else ""
        if text.endswith("\\\\") and not following.startswith("["):
            text = text[:-1]  # rich doubles a final backslash for a tag that may follow; none does here
        out.append(text)
    return Markup("".join(out))


def plain(value: object) -> Text:
    """A rich renderable showing ``value`` as it is, on any console (a :class:`Markup` keeps its style)."""
    if isinstance(value, Text):
        return value
    if isinstance(value, Markup):
        return Text.from_markup(value, emoji=False)
    return Text(str(value))


class PlainConsole(Console):
    """A console that reads markup only in :class:`Markup` strings; any other ``str`` (a table
    cell, a title, a printed line) is shown as it is: no tags, no ``:emoji:`` codes."""

    def render_str(self, text: str, *, style: Any = "", justify: Any = None, overflow: Any = None,
                   emoji: bool | None = None, markup: bool | None = None, highlight: bool | None = None,
                   highlighter: Any = None) -> Text:
        if not isinstance(text, Markup):
            markup, emoji = False, False
        else:
            emoji = False  # escaped user values may hold ":smile:"
        return super().render_str(text, style=style, justify=justify, overflow=overflow, emoji=emoji,
                                  markup=markup, highlight=highlight, highlighter=highlighter)


# --- Markdown ---------------------------------------------------------------------------------

# Characters that start inline Markdown anywhere (emphasis, code, links, tables, strike, maths),
# and those that do only at the start of a line (headings, lists, quotes).
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~$])")
_MD_LINE_START = re.compile(r"^([#+=>-]|\d+[.)])")


def md(value: object) -> str:
    """``value`` as inline Markdown text: no raw HTML, no code spans, no links or emphasis, one line."""
    text = str(value).replace("\r", " ").replace("\n", " ")
    text = html.escape(text, quote=False)  # <script> -> &lt;script&gt;: shown, never run
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return _MD_LINE_START.sub(lambda m: m.group(0)[:-1] + "\\" + m.group(0)[-1], text)


def md_fence(text: str, info: str = "") -> list[str]:
    """``text`` as a fenced code block whose fence is longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{info}", text, fence]


def md_table(columns: list[str], rows: list[list[str]]) -> str:
    """A Markdown table whose every cell is text (:func:`md`): no HTML, code spans or links; "|" escaped."""
    lines = ["| " + " | ".join(md(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(md(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


# --- CSV --------------------------------------------------------------------------------------

# What spreadsheets read as the start of a formula (tab and CR too: some strip them first).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A string a spreadsheet would evaluate gets a leading ``'``; numbers stay numbers."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


# --- matplotlib -------------------------------------------------------------------------------

#: rcParams for every figure: a label like ``$\foo$`` is text, not math (or a LaTeX run).
MPL_RC: dict[str, object] = {"text.parse_math": False, "text.usetex": False}


# --- HTML -------------------------------------------------------------------------------------

def html_text(value: object) -> str:
    """``value`` as HTML text or attribute value."""
    return html.escape(str(value), quote=True)


# --- one-line messages ------------------------------------------------------------------------

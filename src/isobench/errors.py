"""User-facing errors: one line naming the file, the field and the fix; exit code 2.

Messages format the user's values into their text, so :class:`UserError` bounds what it shows in
one place: any single token longer than :data:`VALUE_LIMIT` (a repr'd value, a long name) shows
its start and its length, control characters show escaped, and each part (file, field, message,
fix) has a ceiling, so a 5,000-character value in a study still gives one short line."""

from __future__ import annotations

import re

from isobench.text import clip

#: the longest token (a value as the message echoes it, quotes included) shown whole
VALUE_LIMIT = 80
#: ceilings per part of the line: the safety net for long values with spaces in them
FILE_LIMIT, FIELD_LIMIT, DETAIL_LIMIT, FIX_LIMIT = 400, 120, 600, 400

_LONG_TOKEN = re.compile(rf"\S{{{VALUE_LIMIT + 1},}}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _clip_token(match: re.Match[str]) -> str:
    token = match.group()
    quote = token[0]
    if quote in "'\"" and len(token) > 1 and token[-1] == quote:  # keep a repr's quotes around the cut
        return quote + clip(token[1:-1], VALUE_LIMIT - 2) + quote
    return clip(token, VALUE_LIMIT)


def bounded(text: str, limit: int, cut_tokens: bool = True) -> str:
    """``text`` on one line, each long token cut to its start and length (not a file's path, which
    the user needs whole to find the file); past ``limit`` the middle goes, so the start (what is
    wrong) and the end (often a fix) both stay."""
    text = _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)  # a newline would break the one line
    if cut_tokens:
        text = _LONG_TOKEN.sub(_clip_token, text)
    if len(text) <= limit:
        return text
    tail = limit // 4
    return f"{text[:limit - tail]}…[{len(text) - limit} characters cut]…{text[-tail:]}"


class UserError(Exception):
    """Bad input from the user. The CLI prints ``str(err)`` alone and exits with 2."""

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None,
                 fix: str | None = None) -> None:
        self.file = file
        self.field = field
        self.fix = fix
        self.detail = message
        super().__init__(self._render())

    def _render(self) -> str:
        file = bounded(self.file, FILE_LIMIT, cut_tokens=False) if self.file else ""
        field = bounded(self.field, FIELD_LIMIT) if self.field else ""
        where = ": ".join(part for part in (file, field) if part)
        where = f"{where}: " if where else ""
        fix = f" (fix: {bounded(self.fix, FIX_LIMIT)})" if self.fix else ""
        return f"error: {where}{bounded(self.detail, DETAIL_LIMIT)}{fix}"


class PlatformUnavailable(Exception):
    """A platform cannot run on this host; the message says why and what to do."""

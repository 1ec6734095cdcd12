"""User-facing errors: one line naming the file, the field and the fix; exit code 2."""

from __future__ import annotations


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
        where = ""
        if self.file:
            where = f"{self.file}"
            if self.field:
                where += f": {self.field}"
            where += ": "
        elif self.field:
            where = f"{self.field}: "
        fix = f" (fix: {self.fix})" if self.fix else ""
        return f"error: {where}{self.detail}{fix}"


class PlatformUnavailable(Exception):
    """A platform cannot run on this host; the message says why and what to do."""

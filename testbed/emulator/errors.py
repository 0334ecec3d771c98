"""An AWS error answer, as the emulator sends it."""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status

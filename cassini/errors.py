"""The one exception type for bad input, naming the offending field."""

from __future__ import annotations


class InputError(ValueError):
    """Invalid user input: ``field`` is a JSON-path-like name (``jobs[1].phases[0].start_s``)."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}" if field else problem)

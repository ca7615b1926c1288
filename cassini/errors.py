"""The one exception type for bad input, naming the offending field."""

from __future__ import annotations


class InputError(ValueError):
    """Invalid user input: ``field`` is a JSON-path-like name (``jobs[1].phases[0].start_s``)."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}" if field else problem)

    def __reduce__(self) -> tuple[type[InputError], tuple[str, str]]:
        # pickled by its two fields: a worker process's error reaches the caller as itself
        # (the default rebuilds it from the message alone, and the pool breaks)
        return type(self), (self.field, self.problem)

    def in_file(self, path: object) -> InputError:
        """This error as found in the file ``path``: the file's name leads the message,
        once (an error that already starts with it is returned as it is)."""
        name = str(path)
        if self.field == name or self.field.startswith((f"{name}:", f"{name} ")):
            return self
        return InputError(f"{name}: {self.field}" if self.field else name, self.problem)

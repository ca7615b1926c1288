"""Files a user hands us: one reader with the standard checks, and the argparse marks that
say which command-line arguments name files.

Every check raises :class:`~cassini.errors.InputError` whose field is the path as given,
so a command prints one line such as ``cluster.yaml: empty file``.  In order: missing,
a directory, not readable, empty (or only whitespace), binary (a NUL byte, or bytes that
are not UTF-8), then the parser's own complaint with the line and column it gives.
Nothing here writes to the file.

The marks (:func:`input_file`, :func:`input_dir`, :func:`output_path`) are argparse
``type=`` functions that return the text unchanged (:func:`positive_int` and
:func:`int_in`, for count flags beside them, check their value);
``tests/test_file_inputs.py`` walks the
parsers and gives every ``input_file`` argument an empty, truncated, binary, missing and
unreadable file and a directory (an ``input_dir`` argument: a file, a missing name, an
unreadable folder and an empty one).

Standard input: a command whose one input file may be ``-`` reads it with
:func:`read_input` (text) or :func:`read_stdin`; a reader that needs a path gets a copy
from :func:`spooled`, and :func:`from_stdin` puts ``<stdin>`` back in its errors.  JSON
nested too deeply for the parser, or holding an integer too long to convert, is an
InputError naming the file like any other malformed JSON (:func:`loads_json`).
"""

from __future__ import annotations

import codecs
import functools
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cassini.errors import InputError

STDIN = "-"
#: How errors name standard input (the file ``-``).
STDIN_NAME = "<stdin>"


def input_file(text: str) -> str:
    """argparse ``type`` of an argument naming a file the command reads: the text as it
    is.  The command reads it with :func:`read_text` or checks it with :func:`check_file`
    before anything else (privileged or slow)."""
    return text


def input_dir(text: str) -> str:
    """argparse ``type`` of an argument naming a folder the command reads (checked with
    :func:`check_dir`): the text as it is."""
    return text


def output_path(text: str) -> str:
    """argparse ``type`` of an argument naming a file or folder the command writes (and
    does not read): the text as it is."""
    return text


def positive_float(text: str) -> float:
    """argparse ``type`` of a load, seconds or a target: a finite number above 0."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
    return value


#: The most worker processes any command or library call starts (``serve --workers``,
#: ``advise --workers``, ``sim sweep --workers``): each is a process with its own copy of
#: the inputs; more than this would rather exhaust the machine than go faster.
MAX_WORKERS = 64


def int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """argparse ``type`` of a count: an integer in ``low..high`` (``high`` None: no upper
    bound), e.g. ``--workers`` (``int_in(1, MAX_WORKERS)``: a typo must not fork
    thousands of processes); argparse names the flag and exits 2 otherwise."""
    import argparse

    want = f"an integer >= {low}" if high is None else f"an integer in {low}..{high}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {want}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {want}, got {value}")
        return value

    parse.__name__ = want.removeprefix("an ")
    return parse


#: argparse ``type`` of a count flag: an integer >= 1 (-3 had meant one worker, 0 the
#: default); of a seed or a count that may be 0: an integer >= 0.
positive_int = int_in(1)
non_negative_int = int_in(0)


def check_file(path: str | Path) -> os.stat_result:
    """The ``stat`` of a file that exists, is not a directory and can be opened for
    reading; InputError(path, problem) otherwise.  Pipes and devices pass (``<(cmd)``)."""
    name = str(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise InputError(name, _os_problem(e)) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(name, "is a directory, expected a file")
    if stat.S_ISREG(st.st_mode):
        try:
            with open(path, "rb"):
                pass
        except OSError as e:
            raise InputError(name, _os_problem(e)) from None
    return st


def read_bytes(path: str | Path) -> bytes:
    """The bytes of a user file that is there, readable and not empty (InputError)."""
    check_file(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(str(path), _os_problem(e)) from None
    if not data.strip():
        raise InputError(str(path), "empty file" if not data else "empty file (only whitespace)")
    return data


def check_dir(path: str | Path) -> None:
    """A folder that exists and can be listed; InputError(path, problem) otherwise."""
    name = str(path)
    try:
        st = os.stat(path)
    except OSError as e:
        problem = _os_problem(e).replace("no such file", "no such directory")
        raise InputError(name, problem) from None
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(name, "not a directory")
    try:
        with os.scandir(path):
            pass
    except OSError as e:
        raise InputError(name, _os_problem(e)) from None


def check_nonempty(path: str | Path) -> os.stat_result:
    """:func:`check_file`, and a regular file must hold at least one byte; for files read
    by another library (a capture, a database) without loading them here."""
    st = check_file(path)
    if stat.S_ISREG(st.st_mode) and st.st_size == 0:
        raise InputError(str(path), "empty file")
    return st


def check_text(path: str | Path, head_bytes: int = 1 << 16) -> None:
    """:func:`check_nonempty`, and the first ``head_bytes`` bytes are UTF-8 text without
    NUL bytes: a large text file (a trace) checked before its own reader streams it."""
    check_nonempty(path)
    try:
        with open(path, "rb") as f:
            head = f.read(head_bytes)
    except OSError as e:
        raise InputError(str(path), _os_problem(e)) from None
    if not head.strip():
        raise InputError(str(path), "empty file (only whitespace)")
    decode_text(head, str(path), whole=len(head) < head_bytes)


def read_stdin() -> str:
    """Standard input as text, with :func:`read_text`'s checks (empty, binary), named
    :data:`STDIN_NAME`."""
    stream = sys.stdin
    buffer = getattr(stream, "buffer", None)
    data = buffer.read() if buffer is not None else stream.read().encode("utf-8")
    if not data.strip():
        problem = "empty file" if not data else "empty file (only whitespace)"
        raise InputError(STDIN_NAME, problem)
    return decode_text(data, STDIN_NAME)


def read_input(path: str | Path) -> str:
    """:func:`read_text`, or :func:`read_stdin` when ``path`` is ``-``."""
    return read_stdin() if str(path) == STDIN else read_text(path)


def input_name(path: str | Path) -> str:
    """How errors name the input ``path``: :data:`STDIN_NAME` for ``-``."""
    return STDIN_NAME if str(path) == STDIN else str(path)


@contextmanager
def spooled(text: str, suffix: str = "") -> Iterator[Path]:
    """A private temporary file holding ``text`` (named ``stdin`` + ``suffix``), for a
    reader that needs a path and opens it more than once; removed when the block ends."""
    folder = Path(tempfile.mkdtemp(prefix="cassini-stdin-"))
    try:
        path = folder / f"stdin{suffix}"
        path.write_text(text, encoding="utf-8")
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def from_stdin(e: InputError, spool: Path) -> InputError:
    """``e``, raised reading the :func:`spooled` copy ``spool``, naming standard input
    instead of the copy (its whole message: a trace's bad row puts ``file:line:column``
    before its field)."""
    field, _, problem = str(e).replace(str(spool), STDIN_NAME).partition(": ")
    return InputError(field, problem) if problem else InputError("", field)


def read_jsonl(path: str | Path, source: str = "log") -> list[Any]:
    """The JSON values of a JSON-lines file (``-``: standard input); a bad line is an
    InputError naming the file and the line, a key given twice in one object, too-deep
    nesting and too-long integers included."""
    name = input_name(path)
    out = []
    for n, line in enumerate(read_input(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(loads_json(line))
        except json.JSONDecodeError as e:
            raise InputError(f"{name}: {source} line {n}", f"malformed JSON: {e.msg}") from None
        except ValueError as e:  # DuplicateKey, TooDeep, NumberTooLong
            raise InputError(f"{name}: {source} line {n}", f"malformed JSON: {e}") from None
    return out


def read_text(path: str | Path) -> str:
    """The text of a user file: :func:`read_bytes`, then UTF-8 (a leading byte-order mark
    is dropped); a NUL byte or bytes that are not UTF-8 make it a binary file."""
    data = read_bytes(path)
    return decode_text(data, str(path))


def decode_text(data: bytes, name: str, *, whole: bool = True) -> str:
    """``data`` as UTF-8 text, or InputError(name, "binary file ...").  ``whole=False``:
    ``data`` is the head of a file, and a character cut at its end is not an error."""
    nul = data.find(b"\0")
    if nul >= 0:
        raise InputError(name, f"binary file, expected UTF-8 text (NUL byte at offset {nul})")
    # the mark is dropped here, not by "utf-8-sig", whose offsets start after it (and
    # which decodes a file of only its first two bytes to nothing, without an error)
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return codecs.getincrementaldecoder("utf-8")().decode(data[bom:], final=whole)
    except UnicodeDecodeError as e:
        at = bom + e.start
        raise InputError(
            name, f"binary file, expected UTF-8 text (byte 0x{data[at]:02x} at offset {at})"
        ) from None


class DuplicateKey(ValueError):
    """An object (mapping) that names one key twice: JSON and YAML parsers keep the last
    value silently, so a typo'd override would win unseen."""

    def __init__(self, key: Any, where: str = "") -> None:
        super().__init__(f"duplicate key {key!r}{where}")


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: a dict, or DuplicateKey."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


class TooDeep(ValueError):
    """JSON or YAML nested deeper than the parser's recursion limit."""

    def __init__(self) -> None:
        super().__init__(f"nested too deeply (more than about {sys.getrecursionlimit()} levels)")


class NumberTooLong(ValueError):
    """An integer with more digits than Python converts (``sys.get_int_max_str_digits``)."""

    def __init__(self, digits: str) -> None:
        limit = sys.get_int_max_str_digits()
        super().__init__(f"a number is too long ({digits} digits; at most {limit})")

    @classmethod
    def of(cls, e: ValueError) -> NumberTooLong | None:
        """The NumberTooLong that Python's ValueError ``e`` is, if it is one."""
        found = re.search(r"integer string conversion.*?(\d+) digits", str(e))
        return cls(found.group(1)) if found else None


def _float(literal: str) -> float:
    """A JSON number with a fraction or an exponent, -0.0 as 0.0."""
    return float(literal) + 0.0


def loads_json(text: str) -> Any:
    """``json.loads`` that refuses a key given twice in one object (DuplicateKey), and
    says in its own words when the text is nested too deeply (TooDeep, not a
    RecursionError) or holds an integer too long to convert (NumberTooLong, not Python's
    advice to raise the limit); all three are ValueErrors, as JSONDecodeError is.  A
    ``-0.0`` is read as 0.0: every bound treats them alike, and a value stored and
    echoed back should not carry the sign."""
    try:
        return json.loads(text, object_pairs_hook=unique_object, parse_float=_float)
    except RecursionError:
        raise TooDeep() from None
    except (json.JSONDecodeError, DuplicateKey):
        raise
    except ValueError as e:
        too_long = NumberTooLong.of(e)
        if too_long is None:
            raise
        raise too_long from None


def parse_json(text: str, name: str) -> Any:
    """JSON text of the file ``name``; a syntax error names ``name:line:column``; a key
    given twice in one object, nesting too deep or an integer too long to convert names
    ``name``."""
    try:
        return loads_json(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{name}:{e.lineno}:{e.colno}", f"malformed JSON: {e.msg}") from None
    except ValueError as e:  # DuplicateKey, TooDeep, NumberTooLong
        raise InputError(name, f"malformed JSON: {e}") from None


def parse_yaml(text: str, name: str) -> Any:
    """YAML (or JSON) text of the file ``name``; a syntax error names ``name:line:column``
    where the parser gives them, and so does a key given twice in one mapping."""
    import yaml  # a core dependency; imported here to keep `import cassini` light

    try:
        return yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 - a SafeLoader
    except DuplicateKey as e:
        raise InputError(name, f"malformed YAML: {e}") from None
    except RecursionError:
        raise InputError(name, f"malformed YAML: {TooDeep()}") from None
    except ValueError as e:  # a constructor's: an integer too long, a date like 2001-02-30
        too_long = NumberTooLong.of(e)
        raise InputError(name, f"malformed YAML: {too_long or e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(where, f"malformed YAML: {problem}") from None


@functools.cache
def _unique_key_loader() -> type:
    """yaml's SafeLoader refusing a key given twice in one mapping (DuplicateKey, with the
    line and column of the second)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:  # an unhashable key: SafeLoader says so itself
                    break
                if duplicate:
                    at = key_node.start_mark
                    raise DuplicateKey(key, f" (line {at.line + 1}, column {at.column + 1})")
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def read_data(path: str | Path) -> Any:
    """The JSON (``.json``) or YAML (anything else) document in a user file, with every
    check of :func:`read_text`."""
    text = read_text(path)
    name = str(path)
    return parse_json(text, name) if str(path).endswith(".json") else parse_yaml(text, name)


def _os_problem(e: OSError) -> str:
    """What an OSError says about a path, in a few words."""
    if isinstance(e, FileNotFoundError):
        return "cannot read: no such file"
    if isinstance(e, NotADirectoryError):
        return "cannot read: a folder on its path is a file"
    if isinstance(e, PermissionError):
        return "cannot read: permission denied"
    if isinstance(e, IsADirectoryError):
        return "is a directory, expected a file"
    return f"cannot read: {(e.strerror or str(e)).lower()}"

"""The time-shift agent inside a PyTorch job: every rank of the job waits for the same slot.

What the scheduler hands the job (documented in ``docs/agent.md``):

``CASSINI_SHIFT_S``   the job's time-shift, seconds in [0, period)
``CASSINI_PERIOD_S``  the period its iterations are held to, seconds in [1e-6, one week]
``CASSINI_EPOCH_S``   the wall-clock time (UNIX seconds, in [0, 1e10), at most a day ahead
                      of the clock) slot 0 counts from, shared by jobs
``CASSINI_SHIFT``     optional, ``0``/``false``/``no``/``off``: the advisor recommends no
                      shift (run free); ``1``/``true``/``yes``/``on``: hold the grid (any
                      other value is an error)
``CASSINI_TOLERANCE_S`` optional, seconds: how late an iteration may start before the
                      agent re-aligns the job (the advisor's slip tolerance,
                      :mod:`cassini.slip`; default 5 % of the period); with
                      ``CASSINI_URL`` it overrides the served ``tolerance_s``

or, instead of the three numbers (both set: an error naming them, ambiguous),
``CASSINI_URL`` (a ``cassini serve`` base URL, http or https) and ``CASSINI_JOB_ID``:
rank 0 fetches ``GET {url}/v1/jobs/{id}/time_shift`` (a service down, hung, answering
a 5xx, or a 404 for a job not registered yet: the job runs free, says so once on stderr,
and keeps re-reading unless ``CASSINI_REFRESH_ITERATIONS`` is 0), and again
every ``CASSINI_REFRESH_ITERATIONS`` iterations (default 50; 0: never) with
``If-None-Match`` (a 304 when nothing changed).  A re-read never holds up an iteration:
rank 0 starts it in a background thread one iteration before the refresh iteration and
takes its answer there if it has arrived (waiting for it at most until shortly before
that iteration's slot, time the job would sleep anyway; a job running free waits at most
``FREE_GRACE_S``); an answer that is late is taken at a later refresh iteration, and a
failed one is counted in ``status()`` (``refresh_late``, ``refresh_errors``,
``refresh_error``) while the job keeps its grid.  A changed shift, period or epoch, or a
release, is broadcast to every rank at that iteration and every rank moves to the new
grid at its next slot, together; an answer whose epoch is more than a day ahead of the
clock is refused (the job keeps its grid, ``status()["refresh_refused"]`` says why, one
warning on stderr).  A job that releases itself (it cannot hold its period)
says so: rank 0 sends ``PUT {url}/v1/jobs/{id}/time_shift {"shift": false}`` once (in a
background thread), with
the bearer token of ``CASSINI_TOKEN_FILE`` (the first word of its first line that is not
a comment; the file is read at start-up, an unreadable one is an error there) when set,
and the service answers its partners ``shift: false`` (released with
its group) at their next re-read.  With none of these variables set the job runs free
(``TimeShift.enabled`` is False); set but incomplete (``CASSINI_JOB_ID`` without
``CASSINI_URL``, ``CASSINI_TOLERANCE_S`` or ``CASSINI_SHIFT=1`` without a grid,
``CASSINI_REFRESH_ITERATIONS`` or ``CASSINI_TOKEN_FILE`` without ``CASSINI_URL`` and
``CASSINI_JOB_ID``) is a :class:`TimeShiftError` naming what is missing; every variable
that is set is checked (:func:`check_variables`), whatever the source.

Rank 0 of the process group resolves the settings and plans every slot; the others
receive both through ``torch.distributed.broadcast`` (six float64 once, five at each
refresh iteration, four per iteration; and the reason, as bytes, when the job runs free
or rank 0's settings were refused), so the job takes each decision once.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import math
import os
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cassini.agent import (
    MAX_EPOCH_AHEAD_S,
    MAX_PERIOD_S,
    MIN_PERIOD_S,
    GroupRelease,
    SlotDecision,
    TimeShiftAgent,
    epoch_problem,
)

ENV_SHIFT_S = "CASSINI_SHIFT_S"
ENV_PERIOD_S = "CASSINI_PERIOD_S"
ENV_EPOCH_S = "CASSINI_EPOCH_S"
ENV_SHIFT = "CASSINI_SHIFT"
ENV_TOLERANCE_S = "CASSINI_TOLERANCE_S"
ENV_URL = "CASSINI_URL"
ENV_JOB_ID = "CASSINI_JOB_ID"
ENV_REFRESH = "CASSINI_REFRESH_ITERATIONS"
ENV_TOKEN_FILE = "CASSINI_TOKEN_FILE"
DEFAULT_REFRESH_ITERATIONS = 50
NUMBERS = (ENV_SHIFT_S, ENV_PERIOD_S, ENV_EPOCH_S)
SHIFT_OFF = ("0", "false", "no", "off")  # CASSINI_SHIFT's spellings, case-insensitive
SHIFT_ON = ("1", "true", "yes", "on")
SETTINGS_FLOATS = 5  # ShiftSettings.to_floats
UNCHANGED = -3.0  # first float of a refresh broadcast when the settings did not change
REFUSED = -1.0  # first float of the start-up broadcast: rank 0's settings are an error
NO_SETTINGS = -2.0  # first float of the start-up broadcast: no CASSINI_ variable set
TEXT_BYTES = 1024  # a reason or error sent from rank 0 to the other ranks (UTF-8, cut)
#: How long (seconds) a job running free waits at a refresh iteration for a re-read that
#: has not answered yet (once per re-read); a held job waits at most until shortly before
#: its slot, time it would sleep anyway.
FREE_GRACE_S = 0.01
#: How long (seconds) rank 0 waits for each socket operation of a fetch from the service.
FETCH_TIMEOUT_S = 5.0


class TimeShiftError(ValueError):
    """Bad or missing time-shift settings; the message names the variable or field."""


class ServiceUnavailable(TimeShiftError):
    """``cassini serve`` cannot answer now (not reachable, timed out, a 5xx) or does not
    know the job yet (404).  At start-up :meth:`TimeShift.from_env` runs the job free and
    keeps re-reading; at a refresh the job keeps its grid."""


@dataclass(frozen=True)
class ShiftSettings:
    """A job's slot grid: iteration k starts at ``epoch_s + shift_s + k * period_s``
    (seconds); ``shift`` False means run free (``reason`` says why); ``tolerance_s``
    (seconds, optional) how late an iteration may start before the job is re-aligned."""

    shift: bool
    shift_s: float = 0.0
    period_s: float = 0.0
    epoch_s: float = 0.0
    tolerance_s: float | None = None
    reason: str | None = None
    source: str = "env"

    def __post_init__(self) -> None:
        if not self.shift:
            return
        if not math.isfinite(self.period_s):
            raise TimeShiftError(f"period_s: must be a finite number, got {self.period_s!r}")
        if not self.period_s > 0:
            raise TimeShiftError(f"period_s: must be > 0, got {self.period_s!r}")
        if not MIN_PERIOD_S <= self.period_s <= MAX_PERIOD_S:
            raise TimeShiftError(
                f"period_s: must be in [{MIN_PERIOD_S:g}, {MAX_PERIOD_S:g}] seconds, got "
                f"{self.period_s!r}"
            )
        problem = epoch_problem(self.epoch_s)
        if problem:
            raise TimeShiftError(f"epoch_s: {problem}")
        if not 0 <= self.shift_s < self.period_s:
            raise TimeShiftError(f"shift_s: must be in [0, period_s), got {self.shift_s!r}")
        tol = self.tolerance_s
        if tol is not None and not (math.isfinite(tol) and 0 <= tol < 0.5 * self.period_s):
            raise TimeShiftError(f"tolerance_s: must be in [0, period_s / 2), got {tol!r}")

    def to_floats(self) -> tuple[float, float, float, float, float]:
        """Five floats for one broadcast; a missing tolerance travels as -1."""
        tol = -1.0 if self.tolerance_s is None else self.tolerance_s
        return (float(self.shift), self.shift_s, self.period_s, self.epoch_s, tol)

    @classmethod
    def from_floats(
        cls, values: Sequence[float], source: str, reason: str | None = None
    ) -> ShiftSettings:
        """The settings of :meth:`to_floats`; ``reason``: why the job runs free (sent
        apart, as text)."""
        flag, shift_s, period_s, epoch_s, tol = (float(v) for v in values)
        if flag < 0.5:
            return cls(False, reason=reason or "rank 0 runs this job free", source=source)
        return cls(True, shift_s, period_s, epoch_s, None if tol < 0 else tol, source=source)


def shift_flag(env: Mapping[str, str]) -> bool | None:
    """``CASSINI_SHIFT``: False (run free), True (hold), None (unset or blank); any other
    value is a :class:`TimeShiftError` listing the accepted ones."""
    text = env.get(ENV_SHIFT, "").strip().lower()
    if not text:
        return None
    if text in SHIFT_OFF:
        return False
    if text in SHIFT_ON:
        return True
    raise TimeShiftError(
        f"{ENV_SHIFT}: must be one of {', '.join(SHIFT_ON)} (hold the grid) or "
        f"{', '.join(SHIFT_OFF)} (run free), got {env[ENV_SHIFT]!r}"
    )


def check_variables(env: Mapping[str, str]) -> bool | None:
    """Every CASSINI_ variable that is set, checked on its own whatever the source (a
    one-line :class:`TimeShiftError` naming it): the numbers parse as finite numbers,
    ``CASSINI_TOLERANCE_S`` is >= 0, ``CASSINI_URL`` is an http(s) URL,
    ``CASSINI_REFRESH_ITERATIONS`` an integer >= 0; the three numbers and
    ``CASSINI_URL`` together are ambiguous (unless ``CASSINI_SHIFT`` says run free).
    Returns ``CASSINI_SHIFT``'s flag (:func:`shift_flag`)."""
    flag = shift_flag(env)
    for name in (*NUMBERS, ENV_TOLERANCE_S):
        if env.get(name, "").strip():
            _env_number(env, name)
    tolerance = env_tolerance(env)
    if tolerance is not None and tolerance < 0:
        raise TimeShiftError(
            f"{ENV_TOLERANCE_S}: must be >= 0 seconds, got {env[ENV_TOLERANCE_S]!r}"
        )
    if env.get(ENV_URL):
        check_url(env[ENV_URL])
    if env.get(ENV_REFRESH, "").strip():
        refresh_iterations(env)
    numbers = [name for name in NUMBERS if env.get(name, "").strip()]
    if flag is not False and env.get(ENV_URL) and numbers:
        raise TimeShiftError(
            f"{', '.join(numbers)}, {ENV_URL}: both set (ambiguous): give the three numbers "
            f"or {ENV_URL} and {ENV_JOB_ID}, not both"
        )
    return flag


def settings_from_env(
    environ: Mapping[str, str] | None = None, now_s: float | None = None
) -> ShiftSettings | None:
    """The settings in ``environ`` (default ``os.environ``); None when no CASSINI_
    variable is set.  Raises :class:`TimeShiftError` naming a missing or bad variable,
    an epoch more than a day ahead of ``now_s`` (UNIX seconds, default the clock)
    included.  With ``CASSINI_URL`` it fetches the settings once (a service that does
    not answer is an error here; :meth:`TimeShift.from_env` runs the job free instead)."""
    env = os.environ if environ is None else environ
    flag = check_variables(env)
    if flag is False:
        return ShiftSettings(False, reason=f"{ENV_SHIFT}={env[ENV_SHIFT]}")
    if env.get(ENV_URL):
        settings = service_source(env).first()
        _check_epoch_ahead(settings, f"{ENV_URL}: epoch_s", now_s)
        return settings
    return _settings_of_numbers(env, now_s)


def _settings_of_numbers(env: Mapping[str, str], now_s: float | None) -> ShiftSettings | None:
    """The grid of ``CASSINI_SHIFT_S``, ``CASSINI_PERIOD_S``, ``CASSINI_EPOCH_S`` (and
    ``CASSINI_TOLERANCE_S``), or None when none of them (nor ``CASSINI_SHIFT``) is set."""
    if env.get(ENV_JOB_ID):
        raise TimeShiftError(f"{ENV_URL}: missing (needed with {ENV_JOB_ID})")
    for name in (ENV_REFRESH, ENV_TOKEN_FILE):  # used on the service path only
        if env.get(name, "").strip():
            raise TimeShiftError(f"{name}: needs {ENV_URL} and {ENV_JOB_ID} (missing)")
    present = [name for name in NUMBERS if env.get(name, "").strip()]
    if not present:
        partial = [
            f"{name}={env[name].strip()}"
            for name in (ENV_SHIFT, ENV_TOLERANCE_S)
            if env.get(name, "").strip()
        ]
        if partial:
            raise TimeShiftError(
                f"{ENV_SHIFT_S}, {ENV_PERIOD_S}, {ENV_EPOCH_S}: missing (set with "
                f"{', '.join(partial)}; or give {ENV_URL} and {ENV_JOB_ID})"
            )
        return None
    missing = [name for name in NUMBERS if name not in present]
    if missing:
        raise TimeShiftError(f"{missing[0]}: missing (set with {', '.join(present)})")
    values = {name: _env_number(env, name) for name in NUMBERS}
    try:
        settings = ShiftSettings(
            True,
            values[ENV_SHIFT_S],
            values[ENV_PERIOD_S],
            values[ENV_EPOCH_S],
            env_tolerance(env),
            source="env",
        )
    except TimeShiftError as e:  # name the variable, not the field
        field, _, message = str(e).partition(": ")
        raise TimeShiftError(f"CASSINI_{field.upper()}: {message}") from None
    _check_epoch_ahead(settings, ENV_EPOCH_S, now_s)
    return settings


def env_tolerance(env: Mapping[str, str]) -> float | None:
    """``CASSINI_TOLERANCE_S`` in seconds, or None when unset."""
    return _env_number(env, ENV_TOLERANCE_S) if env.get(ENV_TOLERANCE_S, "").strip() else None


def check_url(url: str) -> None:
    """``CASSINI_URL`` must be an http:// or https:// URL with a host: anything else is a
    one-line :class:`TimeShiftError` naming the variable (urllib's bare ValueError, such
    as ``unknown url type``, named neither)."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as e:
        raise TimeShiftError(f"{ENV_URL}: not a URL ({e}): {url!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or (
        any(c.isspace() or ord(c) < 32 for c in url)
    ):
        raise TimeShiftError(
            f"{ENV_URL}: must be an http:// or https:// URL with a host, got {url!r}"
        )


def _check_epoch_ahead(settings: ShiftSettings, name: str, now_s: float | None) -> None:
    """A held grid whose epoch is more than a day ahead of ``now_s`` (UNIX seconds,
    default the clock): a TimeShiftError naming ``name``, not a job asleep until then."""
    if not settings.shift:
        return
    now = time.time() if now_s is None else now_s
    ahead = settings.epoch_s - now
    if ahead > MAX_EPOCH_AHEAD_S:
        raise TimeShiftError(
            f"{name}: {settings.epoch_s!r} is {ahead / 86400:.1f} days ahead of the clock "
            f"(at most {MAX_EPOCH_AHEAD_S / 86400:g} day): the job would sleep until then"
        )


def _env_number(env: Mapping[str, str], name: str) -> float:
    try:
        value = float(env[name])
    except ValueError:
        raise TimeShiftError(f"{name}: not a number: {env[name]!r}") from None
    if not math.isfinite(value):
        raise TimeShiftError(f"{name}: must be a finite number, got {env[name]!r}")
    return value


def settings_from_url(
    url: str,
    job_id: str,
    timeout_s: float = 5.0,
    opener: Callable[..., Any] = urllib.request.urlopen,
) -> ShiftSettings:
    """Fetch ``GET {url}/v1/jobs/{job_id}/time_shift`` from ``cassini serve``."""
    settings, _ = fetch_settings(url, job_id, None, timeout_s, opener)
    assert settings is not None  # no ETag sent: never "not modified"
    return settings


def _where(url: str, job_id: str) -> str:
    return f"{url.rstrip('/')}/v1/jobs/{urllib.parse.quote(job_id, safe='')}/time_shift"


def fetch_settings(
    url: str,
    job_id: str,
    etag: str | None,
    timeout_s: float = 5.0,
    opener: Callable[..., Any] = urllib.request.urlopen,
) -> tuple[ShiftSettings | None, str | None]:
    """(settings, ETag) of the job's time-shift; settings None when ``etag`` is given and
    the service answers 304 (not modified).  A service that cannot answer now (not
    reachable, timed out, a 5xx) or does not know the job yet (404) raises
    :class:`ServiceUnavailable`; a bad URL or a malformed answer a plain
    :class:`TimeShiftError`."""
    check_url(url)
    where = _where(url, job_id)
    request = urllib.request.Request(where, headers={"If-None-Match": etag} if etag else {})
    try:
        with opener(request, timeout=timeout_s) as resp:
            data = resp.read()
            new_etag = resp.headers.get("ETag")
    except urllib.error.HTTPError as e:
        if e.code == 304 and etag:
            return None, etag
        kind = ServiceUnavailable if e.code == 404 or e.code >= 500 else TimeShiftError
        raise kind(f"{ENV_URL}: {where} answered {e.code}: {_error_text(e)}") from None
    except http.client.InvalidURL as e:
        raise TimeShiftError(f"{ENV_URL}: not a URL ({e}): {url!r}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        why = str(e) or type(e).__name__
        raise ServiceUnavailable(f"{ENV_URL}: cannot fetch {where}: {why}") from None
    except ValueError as e:  # what urllib refuses only when it opens the URL
        raise TimeShiftError(f"{ENV_URL}: cannot fetch {where}: {e}") from None
    try:
        body = json.loads(data.decode())
    except ValueError as e:
        raise TimeShiftError(f"{ENV_URL}: {where}: answer is not JSON: {e}") from None
    return _settings_of_answer(body, where), new_etag


def _settings_of_answer(body: Any, where: str) -> ShiftSettings:
    if not isinstance(body, dict) or "shift" not in body:
        raise TimeShiftError(f"{ENV_URL}: {where}: answer has no 'shift' field")
    if not body["shift"]:
        return ShiftSettings(False, reason=str(body.get("reason") or "no shift"), source="url")
    tolerance = body.get("tolerance_s")
    if tolerance is not None:
        try:
            tolerance = float(tolerance)
        except (TypeError, ValueError):
            raise TimeShiftError(
                f"{ENV_URL}: {where}: tolerance_s: not a number: {tolerance!r}"
            ) from None
    try:
        return ShiftSettings(
            True,
            float(body["shift_s"]),
            float(body["period_s"]),
            float(body["epoch_s"]),
            tolerance,
            source="url",
        )
    except KeyError as e:
        raise TimeShiftError(f"{ENV_URL}: {where}: answer has no {e.args[0]!r} field") from None
    except (TypeError, ValueError) as e:
        raise TimeShiftError(f"{ENV_URL}: {where}: {e}") from None


class ReleaseChannel(Protocol):
    """Where a job's planner learns that its group was released, and reports its own
    release: ``cassini serve``'s registry (:class:`ShiftSource`) or the testbed's release
    board (``testbed.releaseboard.Board``)."""

    job_id: str
    partners: frozenset[str]

    def released(self) -> Iterable[str]:
        """The jobs known to run free (checked before every iteration: keep it cheap)."""
        ...

    def report(self, reason: str) -> None:
        """Say that this job released itself (once); must not raise."""
        ...


def read_token(path: str) -> str:
    """The bearer token of a token file: the first word of its first line that is not
    blank or a ``#`` comment."""
    try:
        text = open(path).read()  # noqa: SIM115 - small file, read once
    except OSError as e:
        raise TimeShiftError(f"{ENV_TOKEN_FILE}: cannot read {path}: {e}") from None
    for line in text.splitlines():
        words = line.split()
        if words and not words[0].startswith("#"):
            return words[0]
    raise TimeShiftError(f"{ENV_TOKEN_FILE}: {path} holds no token")


def check_token_file(env: Mapping[str, str]) -> None:
    """``CASSINI_TOKEN_FILE``, when set, must hold a token now: a missing, unreadable or
    empty file is a one-line :class:`TimeShiftError` naming the variable at start-up, not
    a refused release report hours later."""
    path = env.get(ENV_TOKEN_FILE, "").strip()
    if path:
        read_token(path)


class ShiftSource:
    """Rank 0's link to ``cassini serve``: the job's time-shift, re-read cheaply (a
    conditional GET; 304 when unchanged), and the report of its own release (a PUT).

    Its partners are the service's business: it answers them ``shift: false`` once this
    job is released, so :meth:`released` has nothing to add between re-reads."""

    def __init__(self, url: str, job_id: str, timeout_s: float = 5.0,
                 opener: Callable[..., Any] = urllib.request.urlopen,
                 token_file: str | None = None, tolerance_s: float | None = None) -> None:
        self.url, self.job_id, self.timeout_s, self.opener = url, job_id, timeout_s, opener
        self.token_file = token_file
        self.tolerance_s = tolerance_s  # CASSINI_TOLERANCE_S: overrides the served one
        self.partners: frozenset[str] = frozenset()
        self.etag: str | None = None
        self.errors = 0  # refreshes that failed (the job kept its grid)
        self.last_error: str | None = None  # why the last failed refresh failed
        self.report_error: str | None = None  # why the release report failed, if it did

    def released(self) -> Iterable[str]:
        return ()

    def report(self, reason: str) -> None:
        """``PUT .../time_shift {"shift": false, "reason"}``; a failure is kept in
        ``report_error`` (the job runs free either way)."""
        headers = {"Content-Type": "application/json"}
        try:
            if self.token_file:
                headers["Authorization"] = "Bearer " + read_token(self.token_file)
            body = json.dumps({"shift": False, "reason": f"the job released itself: {reason}"})
            request = urllib.request.Request(
                _where(self.url, self.job_id), data=body.encode(), headers=headers, method="PUT"
            )
            with self.opener(request, timeout=self.timeout_s) as resp:
                resp.read()
        except urllib.error.HTTPError as e:
            self.report_error = f"answered {e.code}: {_error_text(e)}"
        except (TimeShiftError, urllib.error.URLError, http.client.HTTPException, OSError,
                ValueError) as e:
            self.report_error = str(e) or type(e).__name__

    def first(self) -> ShiftSettings:
        settings, self.etag = fetch_settings(self.url, self.job_id, None, self.timeout_s,
                                             self.opener)
        assert settings is not None
        return self._with_tolerance(settings)

    def _with_tolerance(self, settings: ShiftSettings) -> ShiftSettings:
        """The served grid with ``tolerance_s`` (``CASSINI_TOLERANCE_S``) in place of the
        served tolerance, when set."""
        if self.tolerance_s is None or not settings.shift:
            return settings
        try:
            return dataclasses.replace(settings, tolerance_s=self.tolerance_s)
        except TimeShiftError as e:
            message = str(e).partition(": ")[2]
            raise TimeShiftError(
                f"{ENV_TOLERANCE_S}: {message} (period_s {settings.period_s!r} served by "
                f"{ENV_URL})"
            ) from None

    def poll(self) -> ShiftSettings | None:
        """The settings if the service answers new ones, else None (unchanged, or the
        service could not be reached: the job keeps its grid)."""
        try:
            settings, self.etag = fetch_settings(self.url, self.job_id, self.etag,
                                                 self.timeout_s, self.opener)
            return None if settings is None else self._with_tolerance(settings)
        except TimeShiftError as e:
            self.errors += 1
            self.last_error = str(e)
            return None


def service_source(env: Mapping[str, str]) -> ShiftSource:
    """The :class:`ShiftSource` of ``CASSINI_URL`` and ``CASSINI_JOB_ID`` (with
    ``CASSINI_TOKEN_FILE``, read now, and ``CASSINI_TOLERANCE_S``, which overrides the
    served tolerance)."""
    if not env.get(ENV_JOB_ID):
        raise TimeShiftError(f"{ENV_JOB_ID}: missing (needed with {ENV_URL})")
    check_url(env[ENV_URL])
    check_token_file(env)
    return ShiftSource(env[ENV_URL], env[ENV_JOB_ID], timeout_s=FETCH_TIMEOUT_S,
                       token_file=env.get(ENV_TOKEN_FILE) or None,
                       tolerance_s=env_tolerance(env))


def refresh_iterations(env: Mapping[str, str]) -> int:
    """``CASSINI_REFRESH_ITERATIONS`` (default 50; 0: never re-read)."""
    text = env.get(ENV_REFRESH, "").strip()
    if not text:
        return DEFAULT_REFRESH_ITERATIONS
    try:
        value = int(text)
    except ValueError:
        raise TimeShiftError(f"{ENV_REFRESH}: not an integer: {text!r}") from None
    if value < 0:
        raise TimeShiftError(f"{ENV_REFRESH}: must be >= 0, got {value}")
    return value


def _error_text(e: urllib.error.HTTPError) -> str:
    """The service's error as one line (``field: message`` of its JSON error), else the
    HTTP reason."""
    try:
        error = json.loads(e.read().decode()).get("error", "")
    except (ValueError, AttributeError, OSError):
        return str(e.reason)
    if isinstance(error, dict):
        message = str(error.get("message") or e.reason)
        field = error.get("field")
        return f"{field}: {message}" if field else message
    return str(error or e.reason)


class TimeShift:
    """Holds a training job's iterations to its slot grid; a no-op when disabled.

    ``process_group`` is the job's group (default: the whole world when
    ``torch.distributed`` is initialised, else this process alone).  ``ahead`` (default)
    exchanges each slot decision an iteration ahead with an asynchronous broadcast
    (:meth:`cassini.agent.TimeShiftAgent.step_ahead`), so no rank waits for a message
    between iterations; ``ahead=False`` broadcasts it synchronously at every step.  Extra
    keyword arguments go to :class:`cassini.agent.TimeShiftAgent` (``drift_tolerance``,
    ``patience``, ``max_realignments``, ``window``, ``clock``, ``sleep``).  ``source``
    (rank 0) is what ``refresh_every`` iterations re-read, in a background thread (its
    ``poll()``: new settings or None).  ``channel`` (rank 0; default the ``cassini serve``
    source when there is one) is where the job learns that its group was released and
    reports its own release (:class:`cassini.agent.GroupRelease`).
    """

    def __init__(
        self,
        settings: ShiftSettings | None,
        process_group: Any = None,
        *,
        ahead: bool = True,
        source: ShiftSource | None = None,
        refresh_every: int = 0,
        channel: ReleaseChannel | None = None,
        **agent_options: Any,
    ) -> None:
        self.settings = settings
        self.group = process_group
        self.ahead = ahead
        self.source = source  # rank 0 only
        self.refresh_every = refresh_every  # iterations between re-reads (0: never)
        if channel is None and isinstance(source, ShiftSource):
            channel = source
        self.channel = channel  # rank 0 only
        self.group_release = (
            GroupRelease(self.channel.job_id, frozenset(self.channel.partners))
            if self.channel is not None
            else None
        )
        self.changes = 0  # new settings applied since the start
        self.refused: str | None = None  # the last re-read answer refused, and why
        self._agent_options = agent_options
        self._calls = 0
        self._exchange = _AheadExchange(process_group)
        self._refresher = _Refresher(source) if source is not None and refresh_every else None
        self._reporter: threading.Thread | None = None
        self._history = _History()
        self.agent = self._make_agent(settings)
        self._distributed = _world(process_group) > 1
        self._rank = _rank(process_group)

    def _make_agent(self, settings: ShiftSettings | None) -> TimeShiftAgent | None:
        if settings is None or not settings.shift:
            return None
        options = dict(self._agent_options)
        if settings.tolerance_s is not None:
            options.setdefault("slip_tolerance_s", settings.tolerance_s)
        return TimeShiftAgent(settings.shift_s, settings.period_s, settings.epoch_s, **options)

    @classmethod
    def from_env(
        cls,
        process_group: Any = None,
        environ: Mapping[str, str] | None = None,
        **agent_options: Any,
    ) -> TimeShift:
        """Settings from the environment (see the module docstring), resolved on rank 0
        and broadcast, so every rank runs the same grid (and re-reads it together).  A
        job running free keeps rank 0's reason on every rank."""
        env = os.environ if environ is None else environ
        clock = agent_options.get("clock", time.time)
        source: ShiftSource | None = None
        if _world(process_group) <= 1:
            settings, source, refresh = _resolve(env, clock())
        elif _rank(process_group) == 0:
            settings, source, refresh = _send_settings(env, clock(), process_group)
        else:
            settings, refresh = _receive_settings(process_group)
        return cls(settings, process_group, source=source, refresh_every=refresh,
                   **agent_options)

    @property
    def enabled(self) -> bool:
        """True while the job is held to a grid (not disabled, not released)."""
        return self.agent is not None and not self.agent.released

    def wait(self) -> float:
        """Call at the top of every training step: sleeps until this iteration's slot;
        returns the drift (seconds late).  Every ``refresh_every`` iterations a changed
        setting that rank 0 re-read (in the background, started the iteration before) is
        applied on every rank; a re-read that has not answered leaves the grid as it is."""
        self._calls += 1
        every = self.refresh_every
        if every and self._calls > 1 and (self._calls - 1) % every == 0:
            self._refresh()
        if self._refresher is not None and self._calls % every == 0:
            self._refresher.start()  # the next refresh iteration's answer, read meanwhile
        if self.agent is None:
            return 0.0
        agent, group, channel = self.agent, self.group_release, self.channel
        if group is not None and channel is not None and not agent.released:
            group.check(agent, channel.released())
        drift = self._step(agent)
        if group is not None and channel is not None and group.report_due(agent):
            self._report(channel, agent.release_reason or "released")
        return drift

    def _step(self, agent: TimeShiftAgent) -> float:
        if not self._distributed:
            return agent.step()
        planner = self._rank == 0
        sync = lambda values: _broadcast(values, self.group)  # noqa: E731
        if self.ahead:
            ex = self._exchange
            return agent.step_ahead(planner, ex.post, ex.take, first=sync)
        return agent.step(planner, sync)

    def _report(self, channel: ReleaseChannel, reason: str) -> None:
        """Report the job's own release: the service's PUT in a thread of its own (a hung
        service must not hold the ranks up; :meth:`close` waits for it), another channel
        (the testbed's board, a file) at once."""
        if channel is not self.source:
            channel.report(reason)
            return
        self._reporter = threading.Thread(  # daemon: close() waits for it, exit does not
            target=channel.report, args=(reason,), name="cassini-release-report", daemon=True
        )
        self._reporter.start()

    def _refresh(self) -> None:
        """A refresh iteration: rank 0 takes the re-read's answer if it has arrived; a
        change reaches every rank at this same iteration (one broadcast of five floats,
        and the reason when the job is to run free), and every rank starts a new agent
        on the new grid, whose first step waits for its next slot."""
        new = self._fetched() if self._rank == 0 and self._refresher is not None else None
        if self._distributed:
            new = self._share(new)
        if new is None:
            return
        self._exchange.take()  # the old agent's decision in flight: every rank posted it
        if self.agent is not None:
            self._history.keep(self.agent)
        self.settings = new
        self.agent = self._make_agent(new)
        self.changes += 1

    def _fetched(self) -> ShiftSettings | None:
        """Rank 0: the re-read's new settings, if it has answered with a change this job
        can take (an epoch more than a day ahead of the clock is refused)."""
        assert self._refresher is not None
        held = self.agent is not None and not self.agent.released
        new = self._refresher.answer(self._grace_s(), once=not held)
        if new is None or new == self.settings:
            return None
        clock = self._agent_options.get("clock", time.time)
        try:
            _check_epoch_ahead(new, f"{ENV_URL}: epoch_s", clock())
        except TimeShiftError as e:
            first = self.refused is None
            self.refused = f"{e}; kept the current grid"
            if first:
                print(f"cassini.torch: {self.refused}", file=sys.stderr, flush=True)
            return None
        self.refused = None  # an answer taken: an earlier refusal no longer stands
        return new

    def _grace_s(self) -> float:
        """How long rank 0 may wait for a re-read still in flight: until shortly before
        this iteration's slot when held (half the tolerance before it, time the job would
        sleep anyway), else ``FREE_GRACE_S``."""
        agent = self.agent
        if agent is None or agent.released:
            return FREE_GRACE_S
        return agent.slot_time(agent.slot) - agent.clock() - 0.5 * agent.tolerance_s

    def _share(self, new: ShiftSettings | None) -> ShiftSettings | None:
        """Rank 0's change (or none) to every rank, the reason of a job to run free with
        it."""
        if self._rank == 0:
            floats = new.to_floats() if new is not None else (UNCHANGED, 0.0, 0.0, 0.0, -1.0)
            _broadcast(floats, self.group, SETTINGS_FLOATS)
            if new is not None and not new.shift:
                _broadcast_text(new.reason, self.group)
            return new
        floats = _broadcast(None, self.group, SETTINGS_FLOATS)
        if floats[0] == UNCHANGED:
            return None
        reason = _broadcast_text(None, self.group) if floats[0] < 0.5 else None
        return ShiftSettings.from_floats(floats, "rank 0", reason)

    def close(self) -> None:
        """Wait for a decision still in flight (ahead mode), and for the release report
        (the source's timeout plus a second; urllib's timeout bounds each socket
        operation, so a report still unanswered then is abandoned at exit); call before
        destroying the process group.
        Waiting is optional: every rank posted the decision, so it completes."""
        self._exchange.take()
        if self._reporter is not None:
            self._reporter.join(getattr(self.source, "timeout_s", 5.0) + 1.0)

    def attach(self, module: Any) -> Any:
        """Wait before every *training* forward pass of ``module`` (e.g. the DDP model):
        one with ``module.training`` and gradients enabled, taken as one iteration; an
        evaluation forward (``model.eval()``, ``torch.no_grad()``,
        ``torch.inference_mode()``) neither waits nor counts, so a validation pass on
        some ranks only cannot leave the ranks one decision broadcast apart.  Returns the
        hook handle (``.remove()`` detaches).  The hook returns None: the inputs go to
        the forward pass unchanged."""
        import torch

        def hold(held: Any, _inputs: Any) -> None:
            if held.training and torch.is_grad_enabled():
                self.wait()

        return module.register_forward_pre_hook(hold)

    def status(self) -> dict[str, Any]:
        """JSON-ready: enabled, source, ``iterations`` (every :meth:`wait`, whatever the
        state), what the agent did (re-alignments summed over every grid the job was held
        to, the first grid's start-up skips), and how the re-reads went."""
        out: dict[str, Any] = {"enabled": self.enabled}
        if self.refresh_every:
            out["changes"] = self.changes
        if self.source is not None:
            out.update(self._source_status())
        report_error = getattr(self.channel, "report_error", None)
        if report_error:
            out["release_report_error"] = report_error
        if self.settings is not None:
            out["source"] = self.settings.source
            if not self.settings.shift:
                out["reason"] = self.settings.reason
        if self.agent is not None:
            out.update(self.agent.status())
            out["release_reason"] = self.agent.release_reason
        self._history.add_to(out)
        out["iterations"] = self._calls  # every training step, held, free or released
        return out

    def _source_status(self) -> dict[str, Any]:
        """Rank 0's re-reads: failed, late (the job kept its grid), refused."""
        assert self.source is not None
        out: dict[str, Any] = {"refresh_errors": getattr(self.source, "errors", 0)}
        error = getattr(self.source, "last_error", None)
        if self._refresher is not None:
            out["refresh_errors"] += self._refresher.failures
            out["refresh_late"] = self._refresher.late
            error = self._refresher.error or error
        if error:
            out["refresh_error"] = error
        if self.refused:
            out["refresh_refused"] = self.refused
        return out


class _History:
    """What the agents of earlier grids did, kept when a refresh replaces the agent, so
    ``status()`` counts the whole run: the re-alignments of every grid, the start-up
    skips of the first grid only (a later grid's first slot is no start-up)."""

    def __init__(self) -> None:
        self.realignments = 0
        self.startup_skipped_slots: int | None = None  # the first grid's
        self.grids = 0  # agents replaced
        self.release_reason: str | None = None  # the last release's, on an earlier grid

    def keep(self, agent: TimeShiftAgent) -> None:
        self.realignments += agent.realignments
        if self.startup_skipped_slots is None:
            self.startup_skipped_slots = agent.startup_skipped_slots
        self.grids += 1
        self.release_reason = agent.release_reason or self.release_reason

    def add_to(self, out: dict[str, Any]) -> None:
        """The earlier grids' re-alignments added to ``out``'s (the current agent's, if
        any), the first grid's start-up skips in place of the current one's; their
        release reason when the current grid has none."""
        if not self.grids:
            return
        out["realignments"] = int(out.get("realignments", 0)) + self.realignments
        out["startup_skipped_slots"] = self.startup_skipped_slots
        if not out.get("release_reason") and self.release_reason:
            out["release_reason"] = self.release_reason


class _Refresher:
    """Rank 0's re-reads of its source, one at a time, in a background thread, so that a
    slow or hung service never holds an iteration up: :meth:`start` begins one (unless
    one is in flight or its answer not taken), :meth:`answer` takes it if it has arrived."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.late = 0  # refresh iterations at which the re-read had not answered
        self.failures = 0  # re-reads that raised (a ShiftSource counts its own errors)
        self.error: str | None = None  # why the last of those raised
        self._thread: threading.Thread | None = None
        self._answer: ShiftSettings | None = None
        self._waited = False  # the re-read in flight was waited for once already

    def start(self) -> None:
        if self._thread is not None:
            return
        self._answer, self._waited = None, False
        self._thread = threading.Thread(target=self._run, name="cassini-refresh", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._answer = self.source.poll()
        except Exception as e:  # noqa: BLE001 - any failure: the job keeps its grid
            self.failures += 1
            self.error = f"{type(e).__name__}: {e}"

    def answer(self, grace_s: float, once: bool = False) -> ShiftSettings | None:
        """The answer if the re-read has finished, waiting at most ``grace_s`` seconds
        for it (``once``: only the first time it is asked for); None when none arrived
        (counted in ``late``), the source answered nothing new, or the re-read failed."""
        thread = self._thread
        if thread is None:
            return None
        if not (once and self._waited):
            thread.join(max(0.0, grace_s))
        self._waited = True
        if thread.is_alive():
            self.late += 1
            return None
        self._thread = None
        answer, self._answer = self._answer, None
        return answer


def _send_settings(
    env: Mapping[str, str], now_s: float, group: Any
) -> tuple[ShiftSettings | None, ShiftSource | None, int]:
    """Rank 0 of a group: :func:`_resolve`, and its outcome to the other ranks (six
    floats, then the reason of a job to run free or the error, as text).  Any exception
    of rank 0 reaches the other ranks as an error (none waits for a broadcast that never
    comes), then is raised here."""
    settings, source, refresh, error = None, None, 0, ""
    failure: Exception | None = None
    try:
        settings, source, refresh = _resolve(env, now_s)
    except Exception as e:  # noqa: BLE001 - any failure: the peers must hear of it
        failure = e
        error = str(e) if isinstance(e, TimeShiftError) else f"rank 0: {type(e).__name__}: {e}"
        error = " ".join(error.splitlines()) or "rank 0 could not read its time-shift settings"
    if failure is not None:
        floats: tuple[float, ...] = (REFUSED, 0.0, 0.0, 0.0, -1.0)
    else:
        floats = settings.to_floats() if settings else (NO_SETTINGS, 0.0, 0.0, 0.0, -1.0)
    _broadcast((*floats, float(refresh)), group, SETTINGS_FLOATS + 1)
    if failure is not None or (settings is not None and not settings.shift):
        _broadcast_text(error or (settings.reason if settings else None), group)
    if failure is not None:
        raise failure
    return settings, source, refresh


def _receive_settings(group: Any) -> tuple[ShiftSettings | None, int]:
    """Every other rank: rank 0's settings (with its reason) and refresh interval."""
    floats = _broadcast(None, group, SETTINGS_FLOATS + 1)
    flag, refresh = floats[0], int(floats[SETTINGS_FLOATS])
    text = _broadcast_text(None, group) if flag == REFUSED or 0 <= flag < 0.5 else None
    if flag == REFUSED:
        raise TimeShiftError(text or "rank 0 could not read its time-shift settings")
    if flag == NO_SETTINGS:
        return None, 0
    return ShiftSettings.from_floats(floats[:SETTINGS_FLOATS], "rank 0", text), refresh


def _resolve(
    env: Mapping[str, str], now_s: float | None = None
) -> tuple[ShiftSettings | None, ShiftSource | None, int]:
    """(settings, the source to re-read them from, iterations between re-reads);
    ``now_s``: the agent's clock (UNIX seconds), against which the epoch is checked.  A
    service that cannot answer at start-up (:class:`ServiceUnavailable`) leaves the job
    free, re-reading as it would mid-run, with one warning on stderr."""
    if check_variables(env) is not False and env.get(ENV_URL):
        refresh = refresh_iterations(env)
        source = service_source(env)
        try:
            settings = source.first()
        except ServiceUnavailable as e:
            return _free_until_served(e, refresh), source, refresh
        _check_epoch_ahead(settings, f"{ENV_URL}: epoch_s", now_s)
        return settings, source, refresh
    return settings_from_env(env, now_s), None, 0


def _free_until_served(error: ServiceUnavailable, refresh: int) -> ShiftSettings:
    """Rank 0, the service not answering at start-up: the job runs free (the reason on
    every rank) and says so in one line on stderr; the refreshes adopt the service's grid
    once it answers."""
    why = " ".join(str(error).splitlines())
    then = (
        f"re-reads it every {refresh} iterations ({ENV_REFRESH})"
        if refresh
        else f"never re-reads it ({ENV_REFRESH}=0)"
    )
    print(f"cassini.torch: {why}; the job runs free and {then}", file=sys.stderr, flush=True)
    return ShiftSettings(False, reason=f"{why}; running free until the service answers",
                         source="url")


def _world(group: Any) -> int:
    import torch.distributed as dist

    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


def _rank(group: Any) -> int:
    import torch.distributed as dist

    return dist.get_rank(group) if dist.is_available() and dist.is_initialized() else 0


def _device(group: Any) -> Any:
    """Where the group's collectives take their tensors: the current GPU for NCCL."""
    import torch
    import torch.distributed as dist

    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _tensor(values: Sequence[float] | None, group: Any, size: int) -> Any:
    """``size`` float64 on the group's device, holding ``values`` (zeros for None)."""
    import torch

    tensor = torch.zeros(size, dtype=torch.float64, device=_device(group))
    if values is not None:
        tensor.copy_(torch.tensor(list(values), dtype=torch.float64))
    return tensor


def _broadcast(values: Sequence[float] | None, group: Any, size: int = 4) -> list[float]:
    """Group rank 0's ``size`` floats to every rank of ``group``."""
    import torch.distributed as dist

    tensor = _tensor(values, group, size)
    dist.broadcast(tensor, group=group, group_src=0)
    return tensor.cpu().tolist()


def _broadcast_text(text: str | None, group: Any) -> str:
    """Group rank 0's ``text`` (UTF-8, at most ``TEXT_BYTES`` bytes) to every rank."""
    import torch
    import torch.distributed as dist

    tensor = torch.zeros(TEXT_BYTES, dtype=torch.uint8)
    if text:
        data = text.encode()[:TEXT_BYTES]
        tensor[: len(data)] = torch.tensor(list(data), dtype=torch.uint8)
    tensor = tensor.to(_device(group))
    dist.broadcast(tensor, group=group, group_src=0)
    return bytes(tensor.cpu().tolist()).rstrip(b"\0").decode(errors="ignore")


class _AheadExchange:
    """The decision exchange of :meth:`cassini.agent.TimeShiftAgent.step_ahead`: an
    asynchronous broadcast (four float64) posted at one step, waited for at the next."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.pending: tuple[Any, Any] | None = None

    def post(self, values: Sequence[float] | None) -> None:
        import torch.distributed as dist

        tensor = _tensor(values, self.group, 4)
        work = dist.broadcast(tensor, group=self.group, group_src=0, async_op=True)
        self.pending = (work, tensor)

    def take(self) -> list[float] | None:
        if self.pending is None:
            return None
        work, tensor = self.pending
        self.pending = None
        work.wait()
        return tensor.cpu().tolist()


__all__ = [
    "ReleaseChannel",
    "ServiceUnavailable",
    "ShiftSettings",
    "ShiftSource",
    "SlotDecision",
    "TimeShift",
    "TimeShiftError",
    "settings_from_env",
]

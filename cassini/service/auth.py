"""Who may write: bearer tokens from ``--token-file`` (``TOKEN [NAME]`` per line), and the
per-client write rate.  Writes are ``POST``/``PUT``/``DELETE`` under ``/v1/jobs``; reads
stay open.  Without a token file writes are refused unless ``--insecure-writes``.

Tokens are kept as SHA-256 digests only and compared in constant time against every
known digest (no early exit); they never reach a log: the audit names the token's NAME.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cassini.errors import InputError
from cassini.service.errors import Forbidden, TooManyRequests, Unauthorized
from cassini.service.tokenreview import TokenReviewer

MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class Tokens:
    """The accepted tokens: (SHA-256 digest, name) pairs."""

    entries: tuple[tuple[bytes, str], ...]

    def __len__(self) -> int:
        return len(self.entries)

    def name_of(self, token: str) -> str | None:
        """The token's name, or None if it is not one of ours (constant time in the
        token's content: every digest is compared)."""
        digest = _digest(token)
        found = None
        for known, name in self.entries:
            if hmac.compare_digest(known, digest) and found is None:
                found = name
        return found


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def read_token_file(path: str | Path) -> Tokens:
    """``TOKEN [NAME]`` per line (``#`` comments and blank lines skipped; NAME defaults
    to ``line-N``); InputError names the file and line, never the token.  A token given
    twice, under two names, is refused: the audit would always name the first."""
    from cassini import files

    text = files.read_text(path)
    entries: list[tuple[bytes, str]] = []
    names: set[str] = set()
    seen: dict[bytes, tuple[int, str]] = {}  # digest -> (line, name) where first given
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 2:
            raise InputError(f"token-file line {n}", "expected 'TOKEN [NAME]'")
        token, name = words[0], (words[1] if len(words) == 2 else f"line-{n}")
        if len(token) < MIN_TOKEN_CHARS:
            raise InputError(
                f"token-file line {n}", f"token shorter than {MIN_TOKEN_CHARS} characters"
            )
        if name in names:
            raise InputError(f"token-file line {n}", f"name {name!r} given twice")
        digest = _digest(token)
        if digest in seen:
            first_line, first_name = seen[digest]
            raise InputError(
                f"token-file line {n}",
                f"the token of line {first_line} ({first_name!r}) again, named {name!r}: "
                "give each token one name",
            )
        names.add(name)
        seen[digest] = (n, name)
        entries.append((digest, name))
    if not entries:
        raise InputError("token-file", f"{path} holds no token")
    return Tokens(tuple(entries))


@dataclass
class RateLimiter:
    """A token bucket per client: ``rate_per_s`` writes per second, bursts of ``burst``.
    ``rate_per_s`` 0: no limit."""

    rate_per_s: float
    burst: float
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)  # level, at

    MAX_CLIENTS = 100_000

    def take(self, client: str) -> float:
        """Take one write for ``client``: 0.0 when allowed, else seconds until it would
        be."""
        if self.rate_per_s <= 0:
            return 0.0
        now = self.clock()
        level, at = self._buckets.get(client, (self.burst, now))
        level = min(self.burst, level + (now - at) * self.rate_per_s)
        if level < 1.0:
            self._buckets[client] = (level, now)
            return (1.0 - level) / self.rate_per_s
        if len(self._buckets) >= self.MAX_CLIENTS and client not in self._buckets:
            self._buckets.clear()  # a flood of client ids: start over rather than grow
        self._buckets[client] = (level - 1.0, now)
        return 0.0


@dataclass
class WriteGuard:
    """Decides whether a write may go ahead: its token (or open writes) and its rate."""

    tokens: Tokens | None
    insecure_writes: bool
    limiter: RateLimiter
    reviewer: TokenReviewer | None = None  # Kubernetes TokenReview (--token-review)

    async def authenticate(self, authorization: str | None) -> str | None:
        """The writer's token name (None: open writes); raises 401 or 403."""
        name = None
        if self.tokens is not None or self.reviewer is not None:
            scheme, _, token = (authorization or "").partition(" ")
            token = token.strip()
            if scheme.lower() != "bearer" or not token:
                raise Unauthorized("writes need a bearer token: Authorization: Bearer TOKEN")
            if self.tokens is not None:
                name = self.tokens.name_of(token)
            if name is None and self.reviewer is not None:
                name = await self.reviewer.user_of(token)
            if name is None:
                raise Unauthorized("unknown bearer token")
        elif not self.insecure_writes:
            raise Forbidden(
                "writes are disabled: the service was started without --token-file "
                "(or --insecure-writes)",
                "method",
            )
        return name

    def check_rate(self, name: str | None, client_address: str) -> None:
        """Take one write of the client (its token's name, else its address); 429 with
        Retry-After (seconds) when it is over the rate."""
        wait_s = self.limiter.take(name or client_address)
        if wait_s > 0:
            raise TooManyRequests(
                f"over the write rate of {self.limiter.rate_per_s:g}/s for this client; "
                f"retry in {wait_s:.2f} s",
                None,
                headers={"Retry-After": str(max(1, math.ceil(wait_s)))},
            )

    def describe(self, token_file: str | None) -> str:
        """One line for the start-up message."""
        if self.reviewer is not None:
            n = len(self.tokens) if self.tokens is not None else 0
            return (f"writes need a bearer token ({n} in {token_file}, or a Kubernetes "
                    f"token of {', '.join(sorted(self.reviewer.allowed))} via "
                    f"{self.reviewer.url})")
        if self.tokens is not None:
            return f"writes need a bearer token ({len(self.tokens)} in {token_file})"
        if self.insecure_writes:
            return "writes OPEN TO ANYONE who can reach the port (--insecure-writes)"
        return "writes refused (no --token-file; --insecure-writes allows them)"

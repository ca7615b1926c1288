"""``cassini serve``: running the app with uvicorn until SIGINT/SIGTERM (then draining), and
in a thread for tests and benchmarks.

Imports only the standard library at module level, so that ``cassini advise`` does not
pay for the HTTP stack; :func:`serve` imports it.  The options are in
:mod:`cassini.service.options`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from cassini.service.options import (
    DEFAULT_GRACE_S,
    DEFAULT_HOST,
    DEFAULT_KEEP_ALIVE_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_PORT,
    DEFAULT_TIMEOUT_S,
    DESCRIPTION,
    EPILOG,
    add_arguments,
    default_state_path,
)

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_PORT",
    "DEFAULT_TIMEOUT_S",
    "DESCRIPTION",
    "EPILOG",
    "ServiceThread",
    "add_arguments",
    "listen",
    "serve",
    "serve_command",
]


def serve_command(args: argparse.Namespace) -> int:
    """Run ``cassini serve`` with parsed options until SIGINT or SIGTERM."""
    from cassini.errors import InputError
    from cassini.service.app import ServiceConfig
    from cassini.service.store import StateError

    if (args.tls_cert is None) != (args.tls_key is None):
        print("cassini: error: --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    if args.token_review and not args.token_review_user:
        print("cassini: error: --token-review needs --token-review-user", file=sys.stderr)
        return 2
    if not args.kube:
        for flag in _kube_only_flags(args):
            print(f"cassini: error: {flag} needs --kube", file=sys.stderr)
            return 2
    problem = check_input_files(args)
    if problem:
        print(f"cassini: error: {problem}", file=sys.stderr)
        return 2
    kube = _kube_options(args)
    if isinstance(kube, int):
        return kube
    config = ServiceConfig(
        max_body_bytes=args.max_body_bytes,
        timeout_s=args.timeout_s,
        workers=args.workers,
        cluster_file=args.cluster,
        min_score=args.min_score,
        precision_deg=args.precision_deg,
        quiet=args.quiet,
        state_path=default_state_path() if args.state is None else args.state,
        token_file=args.token_file,
        insecure_writes=args.insecure_writes,
        max_jobs=args.max_jobs,
        write_rate_per_s=args.write_rate,
        audit_log=args.audit_log,
        token_review_url=args.token_review,
        token_review_users=tuple(args.token_review_user),
        token_review_ca=args.token_review_ca if args.token_review else None,
        kube=kube,
    )
    tls = (args.tls_cert, args.tls_key) if args.tls_cert else None
    try:
        return serve(config, args.host, args.port, keep_alive_s=args.keep_alive_s, tls=tls)
    except StateError as e:
        print(f"cassini: error: --state {e}", file=sys.stderr)
        return 2
    except InputError as e:
        if e.field.startswith("token-file"):
            print(f"cassini: error: --token-file {args.token_file}: {e}", file=sys.stderr)
        else:
            print(f"cassini: error: --cluster {e.in_file(args.cluster)}", file=sys.stderr)
        return 2


def _kube_options(args: argparse.Namespace) -> Any:
    """``--kube``'s options (None without it), or the exit status of a bad option."""
    from cassini.errors import InputError

    if not args.kube:
        return None
    if args.cluster:
        print("cassini: error: give --cluster or --kube, not both", file=sys.stderr)
        return 2
    if args.publish_interval_s is not None and not args.publish_network_topology:
        print(
            "cassini: error: --publish-interval-s needs --publish-network-topology",
            file=sys.stderr,
        )
        return 2
    from cassini.service.kube.cli import link_options
    from cassini.service.kube.client import api_client
    from cassini.service.kube.sync import KubeOptions

    interval = (
        {} if args.publish_interval_s is None else {"publish_interval_s": args.publish_interval_s}
    )
    try:
        api_client(args.kubeconfig, args.context)  # a bad kubeconfig or context: exit 2 now
        options = KubeOptions(
            kubeconfig=args.kubeconfig,
            context=args.context,
            topology_labels=tuple(args.topology_labels),
            kueue_topology=args.kueue_topology,
            links=link_options(args),
            publish_network_topology=args.publish_network_topology,
            **interval,  # not given: KubeOptions' default (30 s)
        )
    except InputError as e:
        print(f"cassini: error: --kube: {e}", file=sys.stderr)
        return 2
    if options.topology_labels:  # the tiers are known now: check them against the flags
        from cassini.service.kube.topology import check_oversubscription, hierarchy_from_labels

        try:
            check_oversubscription(
                hierarchy_from_labels((), options.topology_labels), options.links
            )
        except InputError as e:  # oversubscription, topology-labels: the flags' names
            print(f"cassini: error: --{e.field}: {e.problem}", file=sys.stderr)
            return 2
    return options


#: The options only ``--kube`` reads (attribute, flag): given without it, exit 2 naming the
#: first, before any file is read (they were silently ignored).
KUBE_ONLY = (
    ("kubeconfig", "--kubeconfig"),
    ("context", "--context"),
    ("topology_labels", "--topology-labels"),
    ("kueue_topology", "--kueue-topology"),
    ("nic_bps", "--nic-bps"),
    ("oversubscription", "--oversubscription"),
    ("publish_network_topology", "--publish-network-topology"),
    ("publish_interval_s", "--publish-interval-s"),  # default None: given only
)


def _kube_only_flags(args: argparse.Namespace) -> list[str]:
    """The ``--kube`` options given (not at their empty defaults), in :data:`KUBE_ONLY`'s
    order."""
    return [flag for attr, flag in KUBE_ONLY if getattr(args, attr, None)]


def _stop_on_kube_failure(service: Any, server: Any, failures: list[str]) -> None:
    """With ``--kube``: a fatal error of its first model (``--oversubscription`` with more
    values than the topology's tiers, no topology, no node in the model) stops ``server``,
    its line kept in ``failures``.
    Called once the service started (``service.kube`` is set then)."""
    if service.kube is None:
        return
    loop = service.loop

    def stop() -> None:
        server.should_exit = True

    def failed(line: str) -> None:
        failures.append(line)
        loop.call_soon_threadsafe(stop)

    service.kube.on_fatal(failed)


def check_input_files(args: argparse.Namespace) -> str | None:
    """What is wrong with the first file the options name (``--flag PATH: problem``), or
    None: every file is checked before the service reads it, opens a port or loads TLS.
    An empty path is refused (``--state ""`` had meant the default file).  The state
    file may be absent or empty (SQLite's new database: it is made, or migrated from
    version 0); an existing one must be a readable file, and the store refuses one that
    is not a sound database."""
    from cassini import files
    from cassini.errors import InputError

    checks: list[tuple[str, str | None, Callable[[str], object]]] = [
        ("--cluster", args.cluster, files.read_text),
        ("--token-file", args.token_file, files.read_text),
        ("--kubeconfig", getattr(args, "kubeconfig", None), files.read_data),
        ("--tls-cert", args.tls_cert, lambda p: _pem(p, "CERTIFICATE")),
        ("--tls-key", args.tls_key, lambda p: _pem(p, "PRIVATE KEY")),
    ]
    if args.token_review:
        checks.append(("--token-review-ca", args.token_review_ca, lambda p: _pem(p, "CERTIFICATE")))
    checks.append(("--state", args.state, _state_file))
    checks.append(("--audit-log", getattr(args, "audit_log", None), _appendable))
    for flag, path, check in checks:
        if path is None:
            continue
        if not path:
            return f"{flag}: empty path, expected a file name"
        try:
            check(path)
        except InputError as e:
            return f"{flag} {e.in_file(path)}"
    if args.tls_cert and args.tls_key:
        import ssl

        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(args.tls_cert, args.tls_key)
        except (ssl.SSLError, ValueError) as e:
            return (
                f"--tls-cert {args.tls_cert} --tls-key {args.tls_key}: not a certificate and "
                f"its private key ({getattr(e, 'reason', None) or e})"
            )
    return None


def _state_file(path: str) -> None:
    """An existing state file must be a file that can be read (absent: it is made)."""
    from cassini import files

    if path != ":memory:" and os.path.lexists(path):
        files.check_file(path)


def _appendable(path: str) -> None:
    """A file the audit log can be appended to, made if absent, in a directory that
    exists (none is created for it); InputError(path, problem) otherwise.  Nothing is
    written or made here."""
    from cassini.errors import InputError

    if os.path.isdir(path):
        raise InputError(path, "is a directory, expected a file")
    if os.path.lexists(path):
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
        except OSError as e:
            raise InputError(path, f"cannot append to it: {e.strerror or e}") from None
        return
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise InputError(path, f"no directory {folder} (it is not created)")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(path, f"cannot create it: directory {folder} is not writable")


def _pem(path: str, label: str) -> None:
    """A PEM file holding a whole ``label`` block (CERTIFICATE, PRIVATE KEY)."""
    from cassini import files
    from cassini.errors import InputError

    text = files.read_text(path)
    begin = text.find("-----BEGIN ")
    if begin < 0 or label not in text[begin : text.find("\n", begin)]:
        raise InputError(path, f"not a PEM {label.lower()} (no '-----BEGIN ...{label}-----')")
    if "-----END " not in text[begin:]:
        raise InputError(path, f"not a PEM {label.lower()}: no END line (cut short?)")


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket (IPv6 when ``host`` has a colon); OSError if it cannot."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say so, and
    # without it an answer's body waits ~40 ms behind its headers (Nagle + delayed ACK)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket, scheme: str = "http") -> str:
    host, port = sock.getsockname()[:2]
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{port}"


def _uvicorn_server(
    app: Any, keep_alive_s: float, grace_s: float, tls: tuple[str, str] | None = None
) -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # serve() installs its own handlers (and SIGHUP); threads install none

    config = uvicorn.Config(
        app,
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_keep_alive=int(max(1, keep_alive_s)),
        timeout_graceful_shutdown=int(grace_s),
        server_header=False,
        date_header=True,
        ssl_certfile=tls[0] if tls else None,
        ssl_keyfile=tls[1] if tls else None,
    )
    return Server(config)


def serve(
    config: Any = None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    keep_alive_s: float = DEFAULT_KEEP_ALIVE_S,
    log: Callable[[str], None] | None = None,
    tls: tuple[str, str] | None = None,
) -> int:
    """Serve until SIGINT or SIGTERM, then drain (requests in flight finish, new ones get
    503) and stop; the exit status.  SIGHUP re-reads the cluster file.  ``tls``: (PEM
    certificate, PEM key) for HTTPS.  Must run in the main thread (signal handlers)."""
    from cassini.service.app import ServiceConfig, create_app

    say = log or _stderr
    config = config or ServiceConfig()
    app = create_app(config, log=log)  # InputError, StateError -> exit 2
    try:
        sock = listen(host, port)
    except OSError as e:
        say(f"cassini: error: cannot listen on {host}:{port}: {e.strerror or e}")
        return 1
    service = app.state.service
    server = _uvicorn_server(app, keep_alive_s, DEFAULT_GRACE_S, tls)
    received: list[int] = []

    async def drain_then_exit() -> None:
        service.drain.draining = True
        await service.drain.until_idle(DEFAULT_GRACE_S)
        server.should_exit = True

    def on_stop(signum: int, frame: Any) -> None:
        received.append(signum)
        if len(received) > 1 or service.loop is None:
            if signum == signal.SIGINT and len(received) > 1:
                server.force_exit = True  # a second Ctrl-C stops at once
            server.should_exit = True
            return
        service.loop.call_soon_threadsafe(service.loop.create_task, drain_then_exit())

    def on_hup(signum: int, frame: Any) -> None:
        loop = service.loop
        if loop is not None:
            loop.call_soon_threadsafe(service.reload)

    handlers = {signal.SIGINT: on_stop, signal.SIGTERM: on_stop, signal.SIGHUP: on_hup}
    previous = {s: signal.signal(s, h) for s, h in handlers.items()}
    failures: list[str] = []  # --kube: the line its fatal error stopped the service with

    def started() -> None:
        _stop_on_kube_failure(service, server, failures)
        url = url_of(sock, "https" if tls else "http")
        say(
            f"cassini serve: listening on {url} (workers {service.pool.size}, "
            f"{service.pool.start_method}; timeout {config.timeout_s:g} s; max body "
            f"{config.max_body_bytes} bytes; cluster: {_cluster_line(service)})"
        )
        say(
            f"cassini serve: state {config.state_path}; "
            f"{service.guard.describe(config.token_file)}; max jobs {config.max_jobs}; "
            f"write rate {config.write_rate_per_s:g}/s per client; audit "
            f"{config.audit_log or 'on standard error'}"
        )

    service.on_started = started
    try:
        server.run(sockets=[sock])
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        sock.close()
    if failures:  # the service stopped itself: exit 2 with its one line
        say(f"cassini: error: {failures[0]}")
        return 2
    name = signal.Signals(received[0]).name if received else "exit"
    say(f"cassini serve: {name}: stopped")
    return 0


def _cluster_line(service: Any) -> str:
    cfg = service.config
    if cfg.kube is not None:
        return "from the Kubernetes API server (--kube; nodes and jobs follow its watches)"
    if cfg.cluster_file is None:
        return "none (extender scores are neutral)"
    reg = service.registry
    return (
        f"{cfg.cluster_file}, {len(reg.cluster.links)} links, {len(reg.cluster.nodes)} nodes, "
        f"{len(reg.jobs())} running jobs"
    )


class ServiceThread:
    """The service on a loopback port in a thread of this process (tests, benchmarks):
    ``with ServiceThread(config) as s: ... s.url ...``."""

    def __init__(self, config: Any = None, *, log: Callable[[str], None] | None = None,
                 host: str = "127.0.0.1", keep_alive_s: float = 5.0) -> None:
        from cassini.service.app import ServiceConfig, create_app

        self.app = create_app(config or ServiceConfig(), log=log)
        self.service = self.app.state.service
        self.sock = listen(host, 0)
        self.url = url_of(self.sock)
        self.port = self.sock.getsockname()[1]
        self.server = _uvicorn_server(self.app, keep_alive_s, 10.0)
        self.failures: list[str] = []  # --kube: the line a fatal error stopped it with
        self.service.on_started = lambda: _stop_on_kube_failure(
            self.service, self.server, self.failures
        )
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, name="cassini-serve"
        )

    def start(self) -> ServiceThread:
        self._thread.start()
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("cassini serve thread stopped during start-up")
            self._thread.join(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(30)
        self.sock.close()

    def __enter__(self) -> ServiceThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)

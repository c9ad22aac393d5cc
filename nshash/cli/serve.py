"""``nshash serve``: the HTTP service on uvicorn, with its start-up checks and socket settings."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from ..errors import ConfigError, install_hint
from ..methods.nshash.core import NSHash
from ..stores.url import mask_url, parse_url
from .common import PROCESSES_PER_CPU, STORE_ENV, UsageError, most_processes

if TYPE_CHECKING:

    from ..methods.keyed import KeyedDedup
    from ..methods.simhash import SimhashDedup

    #: What ``dedup --method`` opens.
    Method = NSHash | KeyedDedup | SimhashDedup

#: Store schemes whose state is shared between processes (so ``serve --workers N`` is safe).
SHARED_SCHEMES = ("redis", "rediss", "unix")


def _service_module() -> str:
    """Return the importable package holding the HTTP app: ``nshash_service`` or ``service``.

    The one next to this ``nshash`` package comes first (a source checkout's ``service``
    beside an editable install's ``nshash_service`` that points at another checkout).
    """
    home = Path(__file__).resolve().parents[2]
    names = ["nshash_service", "service"]
    for mod in list(names):
        try:
            spec = importlib.util.find_spec(mod)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin and Path(spec.origin).resolve().parents[1] == home:
            names.remove(mod)
            names.insert(0, mod)
            break
    for mod in names:
        try:
            app = importlib.import_module(f"{mod}.app")
        except ModuleNotFoundError as exc:
            if exc.name in (mod, f"{mod}.app"):
                continue
            raise ConfigError(
                f"The HTTP service cannot be imported ({exc}): {install_hint('service')}"
            ) from exc
        if hasattr(app, "create_app"):
            return mod
    raise ConfigError(
        "The HTTP service is not installed (neither nshash_service nor service can be"
        f" imported): {install_hint('service')}"
    )


def _cmd_serve(args: argparse.Namespace) -> int:
    """Check everything the service needs, then run it: any start-up problem is one line."""
    url: str | None = args.store or os.environ.get(STORE_ENV)
    if args.workers < 1:
        raise UsageError(f"--workers must be 1 or more, not {args.workers}")
    if args.workers > most_processes():
        raise UsageError(
            f"--workers must be at most {most_processes()} here ({PROCESSES_PER_CPU} per CPU"
            f" core), not {args.workers}"
        )
    if args.workers > 1:
        scheme = parse_url(url)[0] if url else "memory"
        if scheme not in SHARED_SCHEMES:
            raise UsageError(
                f"--workers {args.workers} needs a store shared between processes"
                f" (redis://, rediss:// or unix://), not {mask_url(url or 'memory://')!r}:"
                " memory and LevelDB state lives in one process, so each worker would hand"
                " out its own ids (and LevelDB admits one opener); run one worker or use Redis"
            )
    missing = [m for m in ("uvicorn", "fastapi") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            f"nshash serve needs {' and '.join(missing)}: {install_hint('service')}"
        )
    mod = _service_module()
    if url:
        os.environ[STORE_ENV] = url
    settings = _service_settings(mod)
    listener = _listen(args.host, args.port)
    _no_delay(listener)
    uvicorn = importlib.import_module("uvicorn")
    server_config = importlib.import_module(f"{mod}.server").server_config
    where = {"host": args.host, "port": args.port}
    if args.workers == 1:
        # The app is built and its store opened here, so a bad URL, a missing driver or a
        # locked file is reported as one line; the lifespan then finds the store open.
        app = importlib.import_module(f"{mod}.app").create_app(settings)
        app.state.service.store.open()
        _banner(args, settings, listener)
        uvicorn.Server(server_config(settings, app, **where)).run(sockets=[listener])
        return 0
    # Several workers (Redis only): each builds its own app; check the store opens first.
    holder = importlib.import_module(f"{mod}.deps").StoreHolder(settings)
    holder.open()
    holder.close()
    _banner(args, settings, listener)
    config = server_config(
        settings, f"{mod}.app:create_app", factory=True, workers=args.workers, **where
    )
    from uvicorn.supervisors import Multiprocess

    Multiprocess(config, sockets=[listener]).run()
    return 0


def _banner(args: argparse.Namespace, settings: Any, listener: Any) -> None:
    """Say on stderr where ``nshash serve`` listens and what it serves: its address, store
    (any password masked), method and workers."""
    host, port = listener.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    workers = "1 worker" if args.workers == 1 else f"{args.workers} workers"
    key = "API key required" if settings.api_key is not None else "no API key"
    print(
        f"nshash serve: http://{shown}:{port}/ | store {mask_url(settings.store_url)} |"
        f" method {settings.method} | {workers} | {key}",
        file=sys.stderr,
        flush=True,
    )


def _no_delay(sock: Any) -> None:
    """Turn Nagle's algorithm off on the listening socket; accepted connections inherit it.

    uvicorn creates the shared socket of ``--workers N`` without naming the TCP protocol, so
    asyncio does not set TCP_NODELAY on the connections it accepts, and a kept-alive client
    then waits about 40 ms (the peer's delayed ACK) for every answer sent in two writes.
    """
    import socket

    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _service_settings(mod: str) -> Any:
    """Read the service's settings from the environment; a bad value is a :class:`ConfigError`."""
    pydantic = importlib.import_module("pydantic")
    settings_module = importlib.import_module(f"{mod}.settings")
    try:
        return settings_module.Settings()
    except pydantic.ValidationError as exc:
        problems = []
        for error in exc.errors():
            name = "NSHASH_" + "_".join(str(part) for part in error["loc"]).upper()
            problems.append(f"{name}={error.get('input')!r}: {error['msg']}")
        raise ConfigError("Bad service setting " + "; ".join(problems)) from None


def _listen(host: str, port: int) -> Any:
    """Bind the service's socket now, so an address in use is an error line, not a log."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except (OSError, OverflowError) as exc:
        sock.close()
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"Cannot listen on {host}:{port}: {reason}") from None
    sock.set_inheritable(True)
    return sock


def add_serve_parser(sub: Any) -> None:
    """The ``serve`` command's options."""
    p = sub.add_parser(
        "serve",
        help="run the HTTP service on uvicorn (nshash[service])",
        description="Run the HTTP service and its pages on uvicorn. Settings come from"
        " NSHASH_* variables (NSHASH_STORE_URL, NSHASH_API_KEY, ...; see the README); the"
        " options below override them.",
    )
    p.add_argument(
        "--store",
        metavar="URL",
        help=f"store URL, passed to the service as ${STORE_ENV} (default: the service's)",
    )
    p.add_argument(
        "--host", default="127.0.0.1", metavar="ADDR", help="address to bind (default 127.0.0.1)"
    )
    p.add_argument("--port", type=int, default=8000, metavar="N", help="port (default 8000)")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="uvicorn worker processes (default 1; more need a redis:// store; at most 4 per"
        " CPU)",
    )
    p.set_defaults(func=_cmd_serve, parser=p)

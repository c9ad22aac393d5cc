"""Login sessions of the pages, and the limit on guessing the key.

A browser that gave the API key (the login form, or ``?key=`` once) gets a session token in
its cookie, never the key: a token opens the pages only (the ``/v1`` API still wants the key
in its header), expires after :data:`SESSION_SECONDS`, and is revoked on the server at logout.
A token is ``ID.EXPIRY.MAC``, the MAC an HMAC-SHA256 of ``ID.EXPIRY`` under a secret derived
from the key, so every worker of ``nshash serve --workers N`` accepts the tokens of the others,
and a new key ends every session. A logout is remembered by the worker that answered it
(until the token would have expired anyway); the browser's cookie is deleted too.

:class:`Attempts` counts the wrong keys each client address sent: past
:data:`MAX_ATTEMPTS` in :data:`ATTEMPT_WINDOW` seconds its next tries are refused (429)
without being checked, so the key cannot be guessed at the speed of the server.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict, deque

__all__ = ["ATTEMPT_WINDOW", "MAX_ATTEMPTS", "SESSION_SECONDS", "Attempts", "Sessions"]

#: How long a login lasts, in seconds (12 hours).
SESSION_SECONDS = 12 * 3600

#: Wrong keys one client address may send per :data:`ATTEMPT_WINDOW` seconds.
MAX_ATTEMPTS = 10

#: The window of :data:`MAX_ATTEMPTS`, in seconds.
ATTEMPT_WINDOW = 60.0

#: Client addresses remembered at most (the oldest are forgotten first).
_MAX_CLIENTS = 10_000


class Sessions:
    """Issues, checks and revokes the pages' session tokens for one API key.

    Args:
        api_key: the service's key; the signing secret is derived from it.
        lifetime: seconds a token is valid.
    """

    def __init__(self, api_key: str, lifetime: float = SESSION_SECONDS) -> None:
        self._secret = hmac.new(
            api_key.encode("utf-8"), b"nshash page sessions v1", hashlib.sha256
        ).digest()
        self.lifetime = lifetime
        self._revoked: dict[str, float] = {}
        self._lock = threading.Lock()

    def _mac(self, body: str) -> str:
        return hmac.new(self._secret, body.encode("ascii"), hashlib.sha256).hexdigest()

    def issue(self) -> str:
        """A new session token."""
        body = f"{secrets.token_urlsafe(18)}.{int(time.time() + self.lifetime)}"
        return f"{body}.{self._mac(body)}"

    def _read(self, token: str | None) -> tuple[str, float] | None:
        """The id and expiry of a well-signed, unexpired *token*, else None."""
        if not token or len(token) > 200 or not token.isascii():
            return None
        sid, _, rest = token.partition(".")
        expiry, _, mac = rest.partition(".")
        if not sid or not expiry.isdigit() or not mac:
            return None
        if not hmac.compare_digest(mac, self._mac(f"{sid}.{expiry}")):
            return None
        if int(expiry) <= time.time():
            return None
        return sid, float(expiry)

    def valid(self, token: str | None) -> bool:
        """Whether *token* opens the pages: signed here, not expired, not revoked."""
        read = self._read(token)
        if read is None:
            return False
        with self._lock:
            return read[0] not in self._revoked

    def revoke(self, token: str | None) -> None:
        """End the session of *token* (a logout); unknown tokens are ignored."""
        read = self._read(token)
        if read is None:
            return
        now = time.time()
        with self._lock:
            for sid in [s for s, until in self._revoked.items() if until <= now]:
                del self._revoked[sid]
            self._revoked[read[0]] = read[1]


class Attempts:
    """Counts wrong keys per client address over a sliding window.

    Args:
        most: wrong keys allowed per *window*.
        window: seconds.
    """

    def __init__(self, most: int = MAX_ATTEMPTS, window: float = ATTEMPT_WINDOW) -> None:
        self.most = most
        self.window = window
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def _recent(self, client: str, now: float) -> deque[float] | None:
        times = self._failures.get(client)
        if times is not None:
            while times and times[0] <= now - self.window:
                times.popleft()
        return times

    def wait(self, client: str) -> float:
        """Seconds *client* must wait before its key is checked again (0: go ahead)."""
        now = time.monotonic()
        with self._lock:
            times = self._recent(client, now)
            if times is None or len(times) < self.most:
                return 0.0
            return max(times[0] + self.window - now, 0.1)

    def failed(self, client: str) -> None:
        """Count a wrong key from *client*."""
        now = time.monotonic()
        with self._lock:
            times = self._recent(client, now)
            if times is None:
                times = self._failures[client] = deque()
            else:
                self._failures.move_to_end(client)
            times.append(now)
            while len(self._failures) > _MAX_CLIENTS:
                self._failures.popitem(last=False)

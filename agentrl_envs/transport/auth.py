"""Who may call what: bearer tokens for clients, a separate secret for workers, and per-client quotas.

Two secrets guard the two sides of the controller (docs/security.md):

* **client tokens** (``--client-token``, ``--client-tokens-file``, ``AGENTRL_CLIENT_TOKEN``): the
  client API (``get_indices``, ``start_sample``, ``interact``, ``cancel``, ``version``); a token
  marked ``admin`` (and the shared one, a single-operator set-up) also opens the admin routes;
* **the worker secret** (``--worker-secret``, ``AGENTRL_WORKER_SECRET``): what a worker sends with
  its heartbeats and cancel notices, and what the controller sends on every request to a worker
  (the worker refuses anything else). A client token never registers a worker.

A token travels as ``Authorization: Bearer TOKEN``, or as HTTP Basic with the token as the
password (or as the user name with an empty password): that is what a URL with userinfo
(``http://agentrl:TOKEN@host:5020/api``) becomes in httpx and aiohttp, so AgentRL's own clients
and workers, which send no headers of their own, authenticate through their controller URL.

``/health`` is always open. With no token configured nothing is checked: that is the loopback
default; :func:`require_auth_off_loopback` refuses to serve beyond loopback that way unless told
``insecure``. Tokens are compared with :func:`hmac.compare_digest` and never logged.

The check on the hot routes is a dict lookup of the raw ``authorization`` header bytes plus one
``compare_digest`` (:meth:`Authenticator.principal`); only other spellings (Basic) are parsed.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import AgentRLEnvsError, AuthenticationError, ForbiddenError, QuotaExceededError

CLIENT_TOKEN_ENV = "AGENTRL_CLIENT_TOKEN"
WORKER_SECRET_ENV = "AGENTRL_WORKER_SECRET"
# Routes that never ask for a token (load balancers and `docker HEALTHCHECK` probe them).
OPEN_PATHS = frozenset({"/health"})

CLIENT, WORKER, ADMIN = "client", "worker", "admin"
_MAX_SPELLINGS = 4096  # verified header values remembered for the fast lookup


@dataclass(eq=False)
class Principal:
    """Who a request comes from, with the quota state of its token (one object per token)."""

    name: str
    roles: frozenset[str]
    max_sessions: int | None = None  # sessions open at once, at most
    starts_per_minute: float | None = None  # start_sample calls per minute, at most (a token bucket)
    active: int = 0  # sessions open (or being started) now
    _tokens: float = field(default=0.0, repr=False)
    _refilled: float = field(default_factory=time.monotonic, repr=False)

    def __post_init__(self) -> None:
        self._tokens = float(self.starts_per_minute or 0.0)

    def reserve_session(self) -> None:
        """Take a session slot and a start for this principal, or raise :class:`QuotaExceededError`."""
        if self.max_sessions is not None and self.active >= self.max_sessions:
            raise QuotaExceededError(
                f"client {self.name!r} has {self.active} sessions open, its limit is {self.max_sessions}: "
                "cancel or finish one first",
                client=self.name,
                limit="max_sessions",
                active_sessions=self.active,
                max_sessions=self.max_sessions,
            )
        if self.starts_per_minute is not None:
            now = time.monotonic()
            rate = self.starts_per_minute / 60.0
            self._tokens = min(self.starts_per_minute, self._tokens + (now - self._refilled) * rate)
            self._refilled = now
            if self._tokens < 1.0:
                retry = (1.0 - self._tokens) / rate if rate > 0 else 60.0
                raise QuotaExceededError(
                    f"client {self.name!r} starts at most {self.starts_per_minute:g} sessions a minute: retry in {retry:.1f} s",
                    client=self.name,
                    limit="starts_per_minute",
                    starts_per_minute=self.starts_per_minute,
                    retry_after_s=round(retry, 3),
                )
            self._tokens -= 1.0
        self.active += 1

    def release_session(self) -> None:
        self.active = max(0, self.active - 1)


# Requests when no token is configured (loopback): one principal, no quota unless one is set.
ANONYMOUS = Principal("anonymous", frozenset({CLIENT, WORKER, ADMIN}))


def _basic_token(value: bytes) -> bytes | None:
    """The token in ``Basic base64(user:password)``: the password, or the user when it is empty."""
    if value[:6].lower() != b"basic ":
        return None
    try:
        decoded = base64.b64decode(value[6:].strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, _, password = decoded.partition(b":")
    return password or user or None


class Authenticator:
    """Tokens → principals. Empty (no token at all): every request passes as :data:`ANONYMOUS`."""

    def __init__(self, principals: dict[str, Principal] | None = None) -> None:
        by_token = dict(principals or {})
        if any(not t for t in by_token):
            raise AgentRLEnvsError("an empty token is not a token")
        self.enabled = bool(by_token)
        # raw token and raw header value ("Bearer TOKEN") -> (the same bytes, principal): the
        # lookup finds the candidate, compare_digest confirms it.
        self._tokens: dict[bytes, tuple[bytes, Principal]] = {}
        self._headers: dict[bytes, tuple[bytes, Principal]] = {}
        for token, principal in by_token.items():
            raw = token.encode()
            self._tokens[raw] = (raw, principal)
            for scheme in (b"Bearer ", b"bearer "):
                self._headers[scheme + raw] = (scheme + raw, principal)

    def replace_tokens(self, new: Authenticator) -> tuple[int, int, int]:
        """Take ``new``'s tokens (a rotation: the controller's SIGHUP re-reads its tokens file).

        A token kept under the same name keeps its principal object, so its open sessions and its
        quota's count go on; its roles and limits become the new ones. A removed token is refused
        from now on (its sessions stay open until they end; an admin may cancel them). Returns
        (tokens kept, added, removed). Refuses to drop every client token (that would open the
        controller to anyone)."""
        if not any(CLIENT in p.roles for _, p in new._tokens.values()):
            raise AgentRLEnvsError("the new tokens have no client token: kept the old ones")
        kept = added = 0
        tokens: dict[bytes, tuple[bytes, Principal]] = {}
        headers: dict[bytes, tuple[bytes, Principal]] = {}
        for raw, (_, p) in new._tokens.items():
            old = self._tokens.get(raw)
            if old is not None and old[1].name == p.name:
                old[1].roles, old[1].max_sessions, old[1].starts_per_minute = p.roles, p.max_sessions, p.starts_per_minute
                p = old[1]
                kept += 1
            else:
                added += 1
            tokens[raw] = (raw, p)
            for scheme in (b"Bearer ", b"bearer "):
                headers[scheme + raw] = (scheme + raw, p)
        # Two attribute stores: a lookup running meanwhile (a signal handler interrupts between
        # bytecodes) sees the old tables or the new ones, each consistent.
        removed = len(self._tokens) - kept
        self._tokens, self._headers = tokens, headers
        self.enabled = True
        return kept, added, removed

    def principal(self, authorization: bytes | None) -> Principal | None:
        """The principal a raw ``authorization`` header value names; None if it names none."""
        if not self.enabled:
            return ANONYMOUS
        if authorization is None:
            return None
        hit = self._headers.get(authorization)
        if hit is not None and hmac.compare_digest(hit[0], authorization):
            return hit[1]
        token = _basic_token(authorization)
        if token is None and authorization[:7].lower() == b"bearer ":
            token = authorization[7:].strip()
        hit = self._tokens.get(token) if token else None
        if hit is not None and hmac.compare_digest(hit[0], token):  # type: ignore[arg-type]
            if len(self._headers) < _MAX_SPELLINGS:
                # This exact header value, verified: from now on the fast lookup finds it (a
                # client sends the same Basic header on every step). Only verified values are
                # kept, so refused guesses cannot grow the table.
                self._headers[authorization] = (authorization, hit[1])
            return hit[1]
        return None

    def check(self, authorization: bytes | None, role: str) -> Principal:
        """The principal, if it may use a route of ``role``; else :class:`AuthenticationError`
        (no or a wrong token: 401) or :class:`ForbiddenError` (a token without that role: 403)."""
        p = self.principal(authorization)
        if p is None:
            raise AuthenticationError(
                ("wrong token" if authorization is not None else "missing token")
                + ": send `Authorization: Bearer TOKEN` (or the token as the password of HTTP Basic, "
                "e.g. http://agentrl:TOKEN@host:port/api)"
            )
        if role not in p.roles:
            raise ForbiddenError(f"this token may not use {role} routes", role=role)
        return p


def controller_authenticator(
    *,
    client_tokens: list[str] | None = None,
    tokens_file: str | Path | None = None,
    worker_secret: str | None = None,
    max_sessions: int | None = None,
    starts_per_minute: float | None = None,
) -> Authenticator:
    """The controller's tokens: shared client tokens (client + admin), a tokens file's per-client
    tokens (client; ``admin`` if marked so), and the worker secret (worker routes only).
    ``max_sessions`` / ``starts_per_minute`` are the default quotas of every client token."""
    principals: dict[str, Principal] = {}

    def add(token: str, p: Principal) -> None:
        if token in principals:
            raise AgentRLEnvsError(f"the same token is given twice (for {principals[token].name!r} and {p.name!r})")
        principals[token] = p

    for i, token in enumerate(client_tokens or []):
        add(token, Principal(f"client-{i}" if i else "client", frozenset({CLIENT, ADMIN}), max_sessions, starts_per_minute))
    if tokens_file:
        for name, token, roles, limits in read_tokens_file(tokens_file):
            add(
                token,
                Principal(
                    name,
                    roles,
                    limits.get("max_sessions", max_sessions),  # type: ignore[arg-type]
                    limits.get("starts_per_minute", starts_per_minute),
                ),
            )
    if principals or worker_secret:
        if worker_secret:
            add(worker_secret, Principal("worker", frozenset({WORKER})))
        if not any(CLIENT in p.roles for p in principals.values()):
            raise AgentRLEnvsError("a worker secret without any client token would lock every client out: give --client-token")
    elif max_sessions is not None or starts_per_minute is not None:
        # No tokens (loopback): the quotas hold for everyone together, as one client.
        return _AnonymousWithQuota(Principal("anonymous", ANONYMOUS.roles, max_sessions, starts_per_minute))
    return Authenticator(principals)


class _AnonymousWithQuota(Authenticator):
    def __init__(self, principal: Principal) -> None:
        super().__init__()
        self._anonymous = principal

    def principal(self, authorization: bytes | None) -> Principal | None:
        return self._anonymous


def worker_authenticator(worker_secret: str | None) -> Authenticator:
    """A worker's: the controller must send the worker secret on every route but ``/health``."""
    return Authenticator({worker_secret: Principal("controller", frozenset({WORKER}))} if worker_secret else None)


def read_tokens_file(path: str | Path) -> list[tuple[str, str, frozenset[str], dict[str, float]]]:
    """Lines ``NAME TOKEN [admin] [max_sessions=N] [starts_per_minute=R]``; ``#`` starts a comment.
    The file should be readable by its owner only (its tokens are secrets)."""
    rows = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) < 2:
            raise AgentRLEnvsError(f"{path}:{n}: expected `NAME TOKEN [admin] [max_sessions=N] [starts_per_minute=R]`")
        name, token, *rest = words
        roles = {CLIENT}
        limits: dict[str, float] = {}
        for word in rest:
            key, sep, value = word.partition("=")
            if word == "admin":
                roles.add(ADMIN)
            elif sep and key in ("max_sessions", "starts_per_minute"):
                try:
                    limits[key] = int(value) if key == "max_sessions" else float(value)
                except ValueError:
                    raise AgentRLEnvsError(f"{path}:{n}: {key} must be a number, got {value!r}") from None
            else:
                raise AgentRLEnvsError(f"{path}:{n}: unknown field {word!r} (admin, max_sessions=N, starts_per_minute=R)")
        rows.append((name, token, frozenset(roles), limits))
    return rows


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` keeps the server on this machine."""
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def require_auth_off_loopback(host: str, authenticator: Authenticator, *, insecure: bool, what: str, how: str) -> None:
    """Refuse to serve beyond loopback without tokens, unless ``insecure`` says so on purpose."""
    if is_loopback(host) or authenticator.enabled or insecure:
        return
    raise AgentRLEnvsError(
        f"refusing to serve the {what} on {host} without authentication: anyone who can reach it could use it. "
        f"{how}, or pass --insecure to serve it open anyway (docs/security.md)"
    )


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe: it can ride in a URL's userinfo)."""
    return secrets.token_urlsafe(32)


def env_token(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def split_userinfo(url: str) -> tuple[str, str | None]:
    """``http://user:TOKEN@host/...`` → (``http://host/...``, ``TOKEN``): the URL without its
    userinfo (fit to log) and the token it carried (the password, else the user name)."""
    from urllib.parse import unquote, urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    token = unquote(parts.password or "") or unquote(parts.username or "") or None
    return urlunsplit(parts._replace(netloc=netloc)), token


def bearer(token: str | None) -> dict[str, str]:
    """The header that sends ``token`` (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}

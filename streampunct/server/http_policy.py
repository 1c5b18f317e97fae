"""Which HTTP requests the server answers: methods, ``Host``, ``Origin``, malformed headers, auth.

Sans-I/O: :class:`RequestPolicy` decides from a request's method, kind of
path and headers (anything with websockets' ``Headers.get_all``) and the
address the connection reached; it returns a :class:`Refusal` (status,
metrics reason, one-line message) or None. The server (streampunct/server/app.py,
``process_request``) turns a refusal into the HTTP response, the metric and
the log line. The rules (docs/server.md, "Hosts, origins and methods"):

- Malformed: more than one ``Host``, ``Origin`` or ``Authorization`` header,
  or a ``Host`` / ``Origin`` that does not parse: 400.
- ``Host`` (every request): its name must be the server's own: the bound
  name, any loopback name or address when the server listens on loopback
  only, an address the connection reached, or an ``--allow-host`` name.
  Bound to a wildcard address (``0.0.0.0``, ``::``) with no ``--allow-host``,
  any ``Host`` is accepted (a load balancer forwards its clients' ``Host``).
  A request without ``Host`` (HTTP/1.0 health checks) is not a browser's and
  passes. Otherwise: 421 Misdirected Request. The port is not compared: a
  proxy may listen on another one.
- Methods: ``GET`` and ``HEAD`` on the HTTP endpoints, ``GET`` on the
  WebSocket paths (a handshake is a ``GET``); others: 405 with ``Allow``.
- ``Origin`` (WebSocket handshakes that carry one, i.e. browsers'): the
  server's own origin (scheme http/https, the request's ``Host`` name and
  port) or an ``--allow-origin`` value (``*``: any). Otherwise: 403.
  Clients without ``Origin`` (ASR gateways, the CLI) are unaffected.
- Token (when the server has one): ``Authorization: Bearer TOKEN`` or
  ``?token=TOKEN`` (percent-escaped or not: a raw ``+`` is taken as ``+`` too); otherwise 401.
"""

from __future__ import annotations

import hmac
import http
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import unquote, unquote_plus, urlsplit

#: Methods of the HTTP endpoints (/healthz, /metrics, /captions, and the 404 of unknown paths).
HTTP_METHODS = ("GET", "HEAD")
#: Methods of the WebSocket paths: an opening handshake is a GET.
STREAM_METHODS = ("GET",)
#: Bound addresses that mean "every interface".
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
#: Headers a request may carry once at most.
_SINGLE_HEADERS = ("Host", "Origin", "Authorization")


class HeaderLookup(Protocol):
    def get_all(self, key: str) -> list[str]: ...


@dataclass(frozen=True)
class Refusal:
    """An HTTP answer instead of the request's resource or handshake.

    Attributes:
        status: the HTTP status.
        reason: the ``reason`` label of ``streampunct_handshakes_rejected_total``.
        message: one line (the response body and the log line).
        allow: the ``Allow`` header of a 405.
    """

    status: http.HTTPStatus
    reason: str
    message: str
    allow: str | None = None


def host_name(name: str) -> str:
    """A host name as compared: lowercase, no IPv6 brackets, no trailing dot."""
    name = name.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    return name[:-1] if name.endswith(".") else name


def split_host(value: str) -> tuple[str, int | None] | None:
    """A ``Host`` header's (name, port), or None when it does not parse (RFC 9110 ``uri-host [ ":" port ]``)."""
    value = value.strip()
    if not value or any(ch.isspace() or ch in "/?#@\\" for ch in value):
        return None
    if value.startswith("["):
        close = value.find("]")
        if close < 0:
            return None
        name, rest = value[1:close], value[close + 1:]
        if _ip(name) is None or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else None
    else:
        name, sep, port_text = value.rpartition(":")
        if not sep:
            name, port_text = value, None
        elif ":" in name:
            return None  # an IPv6 address must be bracketed
    port = None
    if port_text:  # "name:" (an empty port) is allowed and means the default
        if not port_text.isascii() or not port_text.isdigit() or int(port_text) > 65535:
            return None
        port = int(port_text)
    name = host_name(name)
    return (name, port) if name else None


def canonical_origin(text: str) -> str | None:
    """An origin as compared (``scheme://host[:port]``, lowercase, no default port), ``null``
    or ``*`` as they are; None when ``text`` is not one."""
    text = text.strip()
    if text in ("*", "null"):
        return text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname or parts.path not in ("", "/") or parts.query or parts.fragment \
            or parts.username is not None:
        return None
    scheme, name = parts.scheme.lower(), host_name(parts.hostname)
    if port == _DEFAULT_PORTS.get(scheme):
        port = None
    shown = f"[{name}]" if ":" in name else name
    return f"{scheme}://{shown}" + (f":{port}" if port is not None else "")


def canonical_host(text: str) -> str | None:
    """An ``--allow-host`` value as compared (a name or address without a port; ``*``: any),
    or None when it is not one."""
    text = text.strip()
    if text == "*":
        return text
    if _ip(host_name(text)) is not None:
        return host_name(text)
    parsed = split_host(text)
    return parsed[0] if parsed is not None and parsed[1] is None and not text.endswith(":") else None


def same_origin(origin: str, host: tuple[str, int | None]) -> bool:
    """Whether ``origin`` (canonical, http or https) names the host and port the request was sent to."""
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or parts.hostname is None:
        return False
    default = _DEFAULT_PORTS[parts.scheme]
    name, port = host
    return host_name(parts.hostname) == name and (parts.port or default) == (port or default)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(text.partition("%")[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def canonical_ip(text: str) -> str | None:
    """An IP address in its canonical form (an IPv4-mapped IPv6 address as IPv4, no zone); None when
    ``text`` is not one."""
    ip = _ip(text)
    return str(ip) if ip is not None else None


def forwarded_client(peer: str, forwarded_for: Iterable[str], trusted: frozenset[str]) -> str | None:
    """The client address a trusted proxy reports: the last address of the ``X-Forwarded-For``
    values (the one the proxy next to the server appended; earlier ones are the client's own
    claims) when ``peer``, the TCP peer, is one of ``trusted`` (canonical addresses); None when
    the peer is not trusted or the last entry is not an IP address."""
    if not trusted or canonical_ip(peer) not in trusted:
        return None
    values = [v for v in forwarded_for if v.strip()]
    return canonical_ip(values[-1].rsplit(",", 1)[-1].strip()) if values else None


def _is_loopback(name: str) -> bool:
    ip = _ip(name)
    return name == "localhost" or (ip is not None and ip.is_loopback)


@dataclass(frozen=True)
class HostPolicy:
    """The ``Host`` names a server answers to.

    Attributes:
        bound: the address or name the server was asked to listen on.
        listening: the addresses its sockets are bound to.
        allow_hosts: ``--allow-host`` names (``*``: any).
    """

    bound: str
    listening: frozenset[str] = frozenset()
    allow_hosts: frozenset[str] = frozenset()

    @property
    def wildcard(self) -> bool:
        return host_name(self.bound) in WILDCARD_HOSTS or any(
            (ip := _ip(a)) is not None and ip.is_unspecified for a in self.listening)

    @property
    def loopback_only(self) -> bool:
        return bool(self.listening) and all(_is_loopback(host_name(a)) for a in self.listening)

    def accepts(self, name: str, reached: Iterable[str] = ()) -> bool:
        """Whether ``name`` (a ``Host`` name, as :func:`host_name` gives it) is this server's;
        ``reached``: the local addresses of the connection."""
        allowed = {host_name(h) for h in self.allow_hosts}
        if "*" in allowed or name in allowed:
            return True
        if self.wildcard and not allowed:
            return True
        if not self.wildcard and name == host_name(self.bound):
            return True
        if self.loopback_only and _is_loopback(name):
            return True
        ip = _ip(name)
        return ip is not None and any(ip == _ip(host_name(a)) for a in (*reached, *self.listening))


@dataclass(frozen=True)
class RequestPolicy:
    """Everything :func:`RequestPolicy.check` needs; built once per server.

    Attributes:
        hosts: the ``Host`` rule.
        allow_origins: canonical origins accepted besides the server's own
            (``*``: any; ``null``: pages without an origin, e.g. ``file://``).
        auth_token: the bearer token handshakes must carry (None: none).
    """

    hosts: HostPolicy
    allow_origins: frozenset[str] = frozenset()
    auth_token: str | None = field(default=None, repr=False)

    def check(self, method: str, path: str, query: str, headers: HeaderLookup, *, stream: bool | None,
              reached: Iterable[str] = ()) -> Refusal | None:
        """The refusal of a request, or None to serve it.

        ``stream``: True for the WebSocket paths, False for the HTTP
        endpoints, None for an unknown path (which gets 404 from the server
        once ``Host`` passed).
        """
        for name in _SINGLE_HEADERS:
            if len(headers.get_all(name)) > 1:
                return Refusal(http.HTTPStatus.BAD_REQUEST, "malformed", f"more than one {name} header")
        host = None
        host_values = headers.get_all("Host")
        if host_values:
            host = split_host(host_values[0])
            if host is None:
                return Refusal(http.HTTPStatus.BAD_REQUEST, "malformed", f"malformed Host header {_shown(host_values[0])}")
            if not self.hosts.accepts(host[0], reached):
                return Refusal(http.HTTPStatus.MISDIRECTED_REQUEST, "host",
                               f"this server does not answer to the host {_shown(host[0])} (--allow-host)")
        if stream is None:
            return None
        allowed = STREAM_METHODS if stream else HTTP_METHODS
        if method not in allowed:
            return Refusal(http.HTTPStatus.METHOD_NOT_ALLOWED, "method",
                           f"method {_shown(method)} not allowed on {path}", allow=", ".join(allowed))
        if not stream:
            return None
        origins = headers.get_all("Origin")
        if origins:
            origin = canonical_origin(origins[0])
            if origin is None:
                return Refusal(http.HTTPStatus.BAD_REQUEST, "malformed", f"malformed Origin header {_shown(origins[0])}")
            if not self.origin_allowed(origin, host):
                return Refusal(http.HTTPStatus.FORBIDDEN, "origin",
                               f"origin {_shown(origin)} not allowed (--allow-origin)")
        if self.auth_token is not None and not self.authorized(headers, query):
            return Refusal(http.HTTPStatus.UNAUTHORIZED, "auth", "missing or wrong token")
        return None

    def origin_allowed(self, origin: str, host: tuple[str, int | None] | None) -> bool:
        if "*" in self.allow_origins or origin in self.allow_origins:
            return True
        return host is not None and same_origin(origin, host)

    def authorized(self, headers: HeaderLookup, query: str) -> bool:
        expected = self.auth_token
        assert expected is not None
        values = headers.get_all("Authorization")
        scheme, _, token = (values[0] if values else "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected.encode()):
            return True
        tokens = _query_tokens(query)
        # one token a request: a query of hundreds of ?token= values would test as many guesses
        return len(tokens) == 1 and any(hmac.compare_digest(t.encode(), expected.encode()) for t in tokens[0])


def is_header_token(token: str) -> bool:
    """``token`` can travel in an ``Authorization: Bearer`` header: visible ASCII only."""
    return bool(token) and all("!" <= ch <= "~" for ch in token)


def _query_tokens(query: str) -> list[tuple[str, ...]]:
    """The ``token`` values of a query string, each read both ways a client may have meant it:
    as a form (``+`` is a space, ``parse_qs``) and as a URI (``+`` is itself, ``unquote``), so
    that a token with a ``+`` in it (base64) works sent raw or escaped."""
    tokens = []
    for pair in query.split("&"):
        name, eq, value = pair.partition("=")
        if eq and unquote_plus(name) == "token":
            tokens.append(tuple(dict.fromkeys((unquote_plus(value), unquote(value)))))
    return tokens


#: A bearer token or a ``token=`` query value in a log line (websockets' DEBUG lines quote
#: request lines and headers; its parser's errors quote the line or header they refused).
_SECRETS = (re.compile(r"(?i)(authorization:\s*)[^\r\n]*"),
            re.compile(r"(?i)(bearer\s+|\btoken=)[^\s&;,'\")]*"))


def redact_tokens(text: str) -> str:
    """``text`` with every ``Authorization`` value, bearer token and ``token=`` value replaced
    by ``<redacted>``."""
    if not _maybe_secret(text):
        return text
    for pattern in _SECRETS:
        text = pattern.sub(lambda m: m.group(1) + "<redacted>", text)
    return text


def _maybe_secret(text: str) -> bool:
    low = text.lower()
    return "token" in low or "bearer" in low or "authorization" in low


def _shown(value: str, limit: int = 80) -> str:
    """A client's value for a log line or a response: quoted, escaped, cut."""
    return repr(value if len(value) <= limit else value[:limit] + "...")

"""The request policy, sans I/O: Host names, origins, methods, malformed headers (streampunct.server.http_policy)."""

from __future__ import annotations

import http

import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.datastructures import Headers

from streampunct.server.http_policy import (
    HostPolicy,
    RequestPolicy,
    canonical_host,
    canonical_origin,
    forwarded_client,
    same_origin,
    split_host,
)


@pytest.mark.parametrize("value, parsed", [
    ("127.0.0.1:8765", ("127.0.0.1", 8765)),
    ("LocalHost", ("localhost", None)),
    ("example.com.:443", ("example.com", 443)),
    ("[::1]:80", ("::1", 80)),
    ("[::1]", ("::1", None)),
    ("host:", ("host", None)),
    ("::1", None), ("[::1", None), ("[nothex]:1", None), ("a b", None), ("x:99999", None), ("x:-1", None),
    ("evil.com/x", None), ("user@evil.com", None), ("", None), (":80", None), ("x:\u0661", None),
])
def test_split_host(value, parsed):
    assert split_host(value) == parsed


@pytest.mark.parametrize("value, canonical", [
    ("http://127.0.0.1:8765", "http://127.0.0.1:8765"),
    ("HTTPS://Example.COM:443", "https://example.com"),
    ("http://example.com:80/", "http://example.com"),
    ("http://[::1]:8080", "http://[::1]:8080"),
    ("chrome-extension://abcdef", "chrome-extension://abcdef"),
    ("null", "null"), ("*", "*"),
    ("http://example.com/page", None), ("http://u:p@example.com", None), ("http://example.com:99999", None),
    ("example.com", None), ("file://", None), ("http://a?x=1", None),
])
def test_canonical_origin(value, canonical):
    assert canonical_origin(value) == canonical


@pytest.mark.parametrize("value, canonical", [
    ("*", "*"), ("Proxy.Example.", "proxy.example"), ("::1", "::1"), ("[::1]", "::1"), ("10.0.0.5", "10.0.0.5"),
    ("proxy.example:443", None), ("a b", None), ("", None), ("proxy.example:", None),
])
def test_canonical_host(value, canonical):
    assert canonical_host(value) == canonical


@pytest.mark.parametrize("origin, host, same", [
    ("http://127.0.0.1:8765", ("127.0.0.1", 8765), True),
    ("http://lb", ("lb", None), True),
    ("http://lb", ("lb", 80), True),
    ("https://lb", ("lb", None), True),  # behind a TLS proxy: the Host has no port
    ("https://lb", ("lb", 80), False),
    ("http://lb:8080", ("lb", None), False),
    ("http://other:8765", ("127.0.0.1", 8765), False),
    ("chrome-extension://abc", ("abc", None), False),
])
def test_same_origin(origin, host, same):
    assert same_origin(origin, host) is same


def test_loopback_binding_answers_loopback_names_and_its_addresses_only():
    policy = HostPolicy("127.0.0.1", frozenset({"127.0.0.1"}))
    for name in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert policy.accepts(name), name
    for name in ("evil.example", "10.0.0.5", "0.0.0.0", "localhost.evil.example"):
        assert not policy.accepts(name), name


def test_a_specific_address_answers_its_address_the_address_reached_and_allowed_names():
    policy = HostPolicy("10.0.0.5", frozenset({"10.0.0.5"}), frozenset({"asr.example"}))
    assert policy.accepts("10.0.0.5") and policy.accepts("asr.example")
    assert not policy.accepts("localhost") and not policy.accepts("other.example")
    assert HostPolicy("asr-box", frozenset({"10.0.0.5"})).accepts("asr-box")


def test_a_wildcard_binding_answers_any_host_unless_allow_host_is_given():
    assert HostPolicy("0.0.0.0", frozenset({"0.0.0.0"})).accepts("anything.example")
    assert HostPolicy("::", frozenset({"::"})).accepts("anything.example")
    policy = HostPolicy("0.0.0.0", frozenset({"0.0.0.0"}), frozenset({"captions.example"}))
    assert policy.accepts("captions.example")
    assert not policy.accepts("rebind.evil.example")
    # IP literals of the machine: the address the client reached (IPv4-mapped too).
    assert policy.accepts("192.168.1.20", reached=("192.168.1.20",))
    assert policy.accepts("192.168.1.20", reached=("::ffff:192.168.1.20",))
    assert not policy.accepts("192.168.1.21", reached=("192.168.1.20",))
    assert HostPolicy("0.0.0.0", frozenset({"0.0.0.0"}), frozenset({"*"})).accepts("x.example")


def _policy(**kwargs) -> RequestPolicy:
    return RequestPolicy(HostPolicy("127.0.0.1", frozenset({"127.0.0.1"})), **kwargs)


@pytest.mark.parametrize("query, ok", [
    ("token=a%2Bb%2F%3D", True),  # escaped
    ("token=a+b/=", True),  # raw, as a URI reads it
    ("x=1&token=a+b/=&y", True),
    ("token=a%20b/=", False),  # a space is not a plus
    ("token=a b/=", False),
    ("token=a+b", False),
    ("tok=a+b/=", False),
    ("token", False),
    ("", False),
    ("token=wrong&token=a+b/=", False),  # one token a request: not one guess per value
    ("token=a+b/=&token=a+b/=", False),
])
def test_a_query_token_with_a_plus_works_escaped_or_raw(query, ok):
    policy = _policy(auth_token="a+b/=")
    assert policy.authorized(Headers([]), query) is ok


def test_the_scheme_is_case_insensitive_and_either_token_right_admits():
    policy = _policy(auth_token="tok")
    for scheme in ("Bearer", "bearer", "BEARER"):
        assert policy.authorized(Headers([("Authorization", f"{scheme} tok")]), "")
    assert not policy.authorized(Headers([("Authorization", "Basic tok")]), "")
    assert policy.authorized(Headers([("Authorization", "Bearer tok")]), "token=wrong")
    assert policy.authorized(Headers([("Authorization", "Bearer wrong")]), "token=tok")
    assert not policy.authorized(Headers([("Authorization", "Bearer wrong")]), "token=wrong")


def test_check_order_and_answers():
    policy = _policy(auth_token="tok")
    own = [("Host", "127.0.0.1:1")]

    def check(method="GET", stream=True, headers=own, query=""):
        return policy.check(method, "/v1/stream", query, Headers(headers), stream=stream)

    assert check(headers=[*own, ("Authorization", "Bearer tok")]) is None
    assert check(query="token=tok") is None
    assert check(headers=[("Host", "evil")]).status == http.HTTPStatus.MISDIRECTED_REQUEST
    assert check(headers=[("Host", "evil"), ("Host", "evil")]).reason == "malformed"  # malformed before foreign
    refusal = check(method="POST")
    assert refusal.status == 405 and refusal.allow == "GET" and refusal.reason == "method"
    assert check(method="HEAD", stream=False) is None
    assert check(method="HEAD", stream=False, headers=[*own, ("Authorization", "x")]) is None  # no token on HTTP
    assert check(stream=None, method="POST") is None  # unknown paths: 404 once the Host passed
    assert check(headers=[*own, ("Origin", "http://evil")]).status == 403
    assert check(headers=[*own, ("Origin", "http://127.0.0.1:1")]).status == 401  # then the token
    refusal = check(headers=[*own, ("Authorization", "Bearer tok"), ("Authorization", "Bearer tok")])
    assert refusal.status == 400 and refusal.message == "more than one Authorization header"


_header_names = st.sampled_from(["Host", "Origin", "Authorization", "Upgrade", "X-Other"])
#: What websockets' parser lets through: tab, visible ASCII and space, bytes 0x80-0xff as Latin-1.
_header_values = st.text(alphabet=st.sampled_from(["\t", *map(chr, range(0x20, 0x7f)), *map(chr, range(0x80, 0x100))]),
                         max_size=40) | st.sampled_from(
    ["127.0.0.1:1", "[::1]", "http://127.0.0.1:1", "Bearer tok", "null", "*", "[", "]:", "http://[::1"])


@given(method=st.sampled_from(["GET", "HEAD", "POST", "BREW"]), stream=st.sampled_from([True, False, None]),
       headers=st.lists(st.tuples(_header_names, _header_values), max_size=6), query=st.text(max_size=20))
def test_check_never_raises_and_refusals_are_one_line(method, stream, headers, query):
    policy = _policy(auth_token="tok", allow_origins=frozenset({"http://ok.example"}))
    refusal = policy.check(method, "/v1/stream", query, Headers(headers), stream=stream, reached=("127.0.0.1",))
    if refusal is not None:
        assert "\n" not in refusal.message and "\r" not in refusal.message
        assert 400 <= refusal.status < 500


@pytest.mark.parametrize(("text", "shown"), [
    ("< GET /v1/stream?token=s3cret&x=1 HTTP/1.1", "< GET /v1/stream?token=<redacted>&x=1 HTTP/1.1"),
    ("< Authorization: Bearer s3cret", "< Authorization: <redacted>"),
    ("invalid HTTP header value: Bearer s3cret\x01", "invalid HTTP header value: Bearer <redacted>"),
    ("unsupported protocol: GET /v1/stream?a=1&TOKEN=s3cr", "unsupported protocol: GET /v1/stream?a=1&TOKEN=<redacted>"),
    ("connection open", "connection open"),
])
def test_tokens_are_redacted_from_log_text(text, shown):
    from streampunct.server.http_policy import redact_tokens

    assert redact_tokens(text) == shown
    assert "s3cr" not in redact_tokens(text)


@pytest.mark.parametrize(("token", "ok"), [("s3cret", True), ("a+b/=", True), ("a b", False), ("tok\n", False),
                                           ("tok\x01", False), ("tök", False), ("", False)])
def test_a_token_must_be_visible_ascii(token, ok):
    from streampunct.server.app import ServerConfig
    from streampunct.server.http_policy import is_header_token

    assert is_header_token(token) is ok
    if ok:
        ServerConfig(auth_token=token)
    elif token:
        with pytest.raises(ValueError, match="auth_token must be visible ASCII"):
            ServerConfig(auth_token=token)


TRUSTED = frozenset({"10.0.0.2", "fd00::2"})


@pytest.mark.parametrize("peer, values, client", [
    ("10.0.0.2", ["203.0.113.9"], "203.0.113.9"),
    # the client's own claims come first; the trusted proxy appends the address it saw last
    ("10.0.0.2", ["1.1.1.1, 203.0.113.9"], "203.0.113.9"),
    ("10.0.0.2", ["1.1.1.1", "203.0.113.9"], "203.0.113.9"),
    ("::ffff:10.0.0.2", ["2001:DB8::1"], "2001:db8::1"),  # a dual-stack socket's mapped peer; canonical forms
    ("fd00::2", [" 198.51.100.7 "], "198.51.100.7"),
    ("10.0.0.3", ["203.0.113.9"], None),  # not a trusted proxy: anyone can send the header
    ("10.0.0.2", [], None),
    ("10.0.0.2", ["unknown"], None),
    ("10.0.0.2", ["203.0.113.9\r\nforged"], None),
])
def test_only_a_trusted_proxy_names_the_client(peer, values, client):
    assert forwarded_client(peer, values, TRUSTED) == client
    assert forwarded_client(peer, values, frozenset()) is None

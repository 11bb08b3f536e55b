"""The project's one redactor: no secret inside a URL reaches a log line, error or repr.

URLs carry secrets in two places, and users type both in ways a URL parser refuses:

- the user info, `scheme://user:password@host` (or without a scheme,
  `user:password@host`), the password often with an unencoded `@`, `/` or `?`
  (`alice:S3cr@tPW@host`: libpq and SQLAlchemy split at the last `@`);
- query (or libpq `key=value` conninfo) parameters: `?password=`, `sslpassword=`,
  `token=`, anything whose name (percent-decoded, as libpq decodes it) holds
  `pass`, `pwd`, `secret`, `token`, `key`, `auth` or `credential`.

`redact_url` replaces each such secret by `***`, in a URL or in any text that contains
URLs (an error message, a traceback's text), without parsing: a malformed URL is
redacted as well as a good one. When unsure it redacts more (a path holding an `@`
loses the part before it), never less. A client's message about a URL it could not
parse quotes pieces of it ("invalid percent-encoded token: \"S3cr%zz\""): where the URL
is known, `redact_secrets` also hides its secrets wherever they appear. It lives in its
own module so `config` (the reprs) and `access` (the error messages) can both use it.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

# A run of text a URL cannot span unencoded (whitespace, quotes, angle brackets): the
# unit searched for user info.
_TOKEN = re.compile(r"[^\s'\"<>]+")
# Where the user info of a token starts: after each `scheme://`, or, in a token with no
# scheme, at its start (after an opening bracket or `=`): a URL typed without one.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_BARE = re.compile(r"^[(\[{,;=]*")
# A parameter: its name after `?`, `&`, `;`, `#`, whitespace or the text's start, up to `=`.
# (A `:` ending the value before a space is the message's, "...?password=x: refused".)
_PARAM = re.compile(r"(?P<pre>(?:^|[?&;#\s(,]))(?P<name>[^=&;#?\s'\"<>()]+)="
                    r"(?P<value>[^&;#\s'\"<>]*?)(?=:?(?:[&;#\s'\"<>]|$))")
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|key|auth|credential", re.IGNORECASE)


def redact_url(text: str) -> str:
    """`text` (a URL, or a message that contains URLs) with every URL secret as `***`:
    each user info's password and each secret-named parameter's value."""
    # parameters first: a query value may hold an `@` the user info's search would take
    # for the end of a password, and swallow the parameter's name with it
    return _TOKEN.sub(_userinfo, _PARAM.sub(_param, text))


def _userinfo(match: re.Match[str]) -> str:
    token = match.group()
    out = []
    at = 0
    for start in _starts(token):
        begin = start.end()
        if begin < at:
            continue
        end = _userinfo_end(token, begin)
        if end < 0:
            continue
        colon = token.find(":", begin, end)
        if colon < 0 or token.find("/", begin, colon) >= 0:  # a user, no password
            continue
        out.append(token[at:colon + 1] + "***")
        at = end
    return "".join(out) + token[at:]


def _starts(token: str) -> list[re.Match[str]]:
    bare = _BARE.match(token)
    assert bare is not None  # it matches the empty start of every text
    return list(_SCHEME.finditer(token)) or [bare]


def _userinfo_end(token: str, begin: int) -> int:
    """Where the user info starting at `begin` ends (its last `@`), or -1 for none: the
    last `@` before the first `?` or `#` that follows the first `@` (a password may hold
    `@`, `/`, `?`; a query may hold `@`)."""
    first = token.find("@", begin)
    if first < 0:
        return -1
    query = min((i for i in (token.find("?", first), token.find("#", first)) if i >= 0),
                default=len(token))
    return token.rfind("@", begin, query)


def _param(match: re.Match[str]) -> str:
    if not _SECRET_NAME.search(unquote(match.group("name"))) or not match.group("value"):
        return match.group()
    return f"{match.group('pre')}{match.group('name')}=***"


def url_secrets(url: str) -> list[str]:
    """The secrets `url` holds, as `redact_url` finds them: its user info's password and
    each secret-named parameter's value (also percent-decoded: a client may echo either)."""
    found = [m.group("value") for m in _PARAM.finditer(url)
             if m.group("value") and _SECRET_NAME.search(unquote(m.group("name")))]
    rest = _PARAM.sub(_param, url)  # as `redact_url` reads it: parameters first
    for start in _starts(rest):
        begin = start.end()
        end = _userinfo_end(rest, begin)
        colon = rest.find(":", begin, end) if end >= 0 else -1
        if colon >= 0 and rest.find("/", begin, colon) < 0:
            found.append(rest[colon + 1:end])
    return [s for secret in found for s in {secret, unquote(secret)} if s]


# The shortest secret, or piece of one, `redact_secrets` hides wherever it appears: a
# client that splits a password at an unencoded `@` or `/` echoes the rest ("failed to
# resolve host 'tPW@127.0.0.1'"); hiding every 1- or 2-character string would garble the
# message (inside a URL `redact_url` hides them all the same).
_SHORTEST_PIECE = 3


def redact_secrets(text: str, *urls: str) -> str:
    """`text` (a client's message about `urls`) with every URL secret as `***`: what
    `redact_url` finds, and each secret of `urls` (`url_secrets`) and each piece of one
    between the separators a client splits a URL at, wherever it appears."""
    text = redact_url(text)
    pieces: set[str] = set()
    for url in urls:
        for secret in url_secrets(url):
            pieces.update(p for p in (secret, *re.split(r"[@/?#:&;%=]", secret))
                          if len(p) >= _SHORTEST_PIECE)
    for piece in sorted(pieces, key=len, reverse=True):
        text = text.replace(piece, "***")
    return text

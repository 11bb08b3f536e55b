"""The project's one redactor: a password inside a URL never reaches a log line, error or repr.

URLs carry credentials as `scheme://user:password@host` (and users type them
without a scheme, `user:password@host`). `redact_url` replaces every such
password by `***`, in a URL or in any text that contains URLs (an error
message, a traceback's text). It lives in its own module so `config` (the
reprs) and `access` (the error messages) can both use it.
"""

from __future__ import annotations

import re

# user:password@ where user and password hold no separator a URL would end them at.
_USERINFO = re.compile(r"(?P<user>[^\s:/@'\"<>()\[\]{},;]+):(?P<password>[^\s/@'\"<>]+)@")


def redact_url(text: str) -> str:
    """`text` (a URL, or a message that contains URLs) with each URL password replaced by ***."""
    return _USERINFO.sub(r"\g<user>:***@", text)

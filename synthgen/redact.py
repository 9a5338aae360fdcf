"""Credentials out of everything printed or written: one function, ``redact``, applied where text
leaves the process (stderr, --log-file, the launched server's log header, errors.jsonl,
settings.jsonl). A base module: imports nothing of the package.

What it hides (the value becomes ``***``, the shape stays readable):

    http://TOKEN@host, http://user:p@ss@host      the user part of a URL (a user name is kept
                                                   when a password follows it)
    ?api_key=V  &key=V  &token=V  &X-Amz-Signature=V   query parameters named like a credential
    --api-key V  --api-key=V  --hf-token 'V W'     command-line flags whose name ends in key,
                                                   token, secret, password (not --max-tokens,
                                                   --tokenizer)
    API_KEY=V  SGLANG_API_KEY=V  HF_TOKEN=V        environment-style assignments
    Authorization: Bearer V,  Bearer V             HTTP credentials
    the run's own API key, wherever it appears     (``remember`` registers it)
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"

# Words a credential's name ends with (a query parameter, a flag, an environment variable).
_SECRET_WORD = r"(?:api[-_]?key|access[-_]?key|secret[-_]?key|key|token|secret|password|passwd|pwd|credentials?)"
_QUOTED_OR_WORD = r"(?:'[^']*'|\"[^\"]*\"|[^\s'\"]+)"

# (pattern, replacement), applied in order. Each starts only where a name can start (a lookbehind, not \b),
# so a long run of letters is tried once, not at every position: linear in the line's length.
_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    # The authority's user part: everything up to the last @ before the path (a password may hold @).
    (re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]{0,31}://)([^\s/?#@:]+):[^\s/?#]*@"), rf"\1\2:{MASK}@"),
    (re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]{0,31}://)[^\s/?#:]+@(?=[^\s/?#@]+)"), rf"\1{MASK}@"),
    # Query parameters named like a credential, and signatures (AWS, GCS).
    (
        re.compile(rf"(?i)([?&;](?:[\w.-]*[-_.])?(?:{_SECRET_WORD}|sig|signature|auth)=)[^&#\s'\"]*"),
        rf"\1{MASK}",
    ),
    # Command-line flags: --api-key V, --api-key=V, --admin-api-key 'V'.
    (re.compile(rf"(?i)((?<![\w-])--?(?:[a-z0-9]+[-_])*{_SECRET_WORD})(=|\s+){_QUOTED_OR_WORD}"), rf"\1\2{MASK}"),
    # Environment-style assignments: API_KEY=V, SGLANG_API_KEY=V, HF_TOKEN=V (upper case, as in a shell).
    (
        re.compile(
            r"(?<![\w-])((?:[A-Z0-9]+_)*(?:API_?KEY|ACCESS_KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD)=)" + _QUOTED_OR_WORD
        ),
        rf"\1{MASK}",
    ),
    # JSON or Python reprs: "api_key": "V", api_key='V'.
    (
        re.compile(rf"(?i)(?<![a-z0-9_])([\"']?(?:[a-z0-9]+_)*{_SECRET_WORD}[\"']?\s*[:=]\s*)([\"'])(?:(?!\2).)*\2"),
        rf"\1\2{MASK}\2",
    ),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{4,}"), rf"\1 {MASK}"),
)

# A key of a JSON object whose value is a credential: "api_key", "hf-token", "password".
_SECRET_NAME = re.compile(rf"(?i)(?:[a-z0-9]+[-_])*{_SECRET_WORD}")

_known: set[str] = set()


def remember(secret: str | None) -> None:
    """Hide this exact value (the run's API key) wherever it appears from now on."""
    if secret and len(secret) >= 6:  # a shorter "key" would blank out ordinary words
        _known.add(secret)


def redact(text: str) -> str:
    """``text`` with every credential shape and every remembered secret replaced by ***."""
    for secret in _known:
        if secret in text:
            text = text.replace(secret, MASK)
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text


def redact_value(value: Any) -> Any:
    """``redact`` on every string inside a JSON-like value; the value of a key named like a
    credential ("api_key", "token") is hidden whatever it is."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {
            key: MASK if isinstance(key, str) and _SECRET_NAME.fullmatch(key) else redact_value(item)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_value(item) for item in value]
    return value

"""The one redaction rule: which config keys hold secrets, and how a secret is masked in text.

Every config, manifest, summary, stored error text and log line the project writes or prints
goes through :func:`redact` (mappings) or :func:`redact_text` (free text). Imports nothing of
the project, so every layer (the store included) can use it.

The rule (:func:`is_secret_key`), on the key's words (split at ``_ - .`` and camelCase;
``store.s3.secret_key`` -> ``store s3 secret key``):

* a key whose **last word names where a secret lives** (``env``, ``file``, ``path``, ``dir``,
  ``var``: ``password_env``, ``api_key_file``) is kept: it holds a name, not the secret;
* else it is secret when a word contains ``secret``, ``passw`` (password, passwd),
  ``passphrase``, ``credential``, ``authoriz``, ends with ``token`` (``token``, ``hf_token``,
  ``sessionToken``; not ``max_tokens``, ``tokenizer``), is ``pass`` / ``pwd``, or is a glued
  ``<api|access|secret|private|...>key``;
* else it is secret when its **last word is** ``key`` (``key``, ``api_key``, ``secret_key``,
  ``access_key``, ``private_key``, ``ssh_key``), unless the word before it makes it a data key
  (:data:`DATA_KEY_PREFIXES`: ``primary_key``, ``foreign_key``, ``sort_key``, ``cell_key``,
  ``order_key`` ...). ``key`` elsewhere (``key_columns``, ``order_keys``, ``access_key_id``)
  is not a secret.

Values: a secret key's value is replaced by :data:`REDACTED` unless it is empty (None, "").
Every string value, secret key or not, also goes through :func:`redact_text`: the userinfo of a
URL (``http://user:pw@host`` -> ``http://<redacted>@host``), ``name=value`` pairs whose name
is secret (query strings, libpq conninfo, echoed overrides), quoted ``"name": "value"`` pairs
and ``Bearer <token>``. A usage text's placeholder value (``key=value``, ``key=<...>``) is
kept (:data:`PLACEHOLDER_VALUES`).
"""
from __future__ import annotations

import logging
import re

REDACTED = "<redacted>"

#: Last words that make a key name *where* a secret lives (kept as they are).
LOCATION_WORDS = frozenset({"env", "file", "path", "dir", "var"})
#: Word fragments that make a key secret wherever they occur in a word.
SECRET_FRAGMENTS = ("secret", "passw", "passphrase", "credential", "authoriz")
#: Whole words that make a key secret.
SECRET_WORDS = frozenset({"pass", "pwd"})
_GLUED_KEY = re.compile(r"(api|access|secret|private|master|account|auth|encryption|signing|ssh|sas)key$")
#: Words before a final ``key`` that make it a data key, not a secret.
DATA_KEY_PREFIXES = frozenset({
    "primary", "foreign", "sort", "order", "ordering", "partition", "cluster", "clustering", "join",
    "cell", "score", "unique", "group", "grouping", "dedup", "cache", "distinct", "row", "hash", "lookup",
    "shard", "dict", "map", "analysis", "pair", "index", "natural", "surrogate", "composite",
    "candidate", "exec", "tie", "table", "column", "match", "compare", "dedupe", "idempotency",
})

_CAMEL = re.compile(r"([a-z0-9])([A-Z])")


def key_words(key: str) -> list[str]:
    """The words of a config key: ``store.s3.secretKey`` -> ``['store', 's3', 'secret', 'key']``."""
    return [w for w in re.split(r"[^a-z0-9]+", _CAMEL.sub(r"\1_\2", str(key)).lower()) if w]


def is_secret_key(key: str) -> bool:
    """True when the value of config key ``key`` is a secret (module docstring: the rule)."""
    words = key_words(key)
    if not words or words[-1] in LOCATION_WORDS:
        return False
    for w in words:
        if (w in SECRET_WORDS or w.endswith("token") or _GLUED_KEY.search(w)
                or any(f in w for f in SECRET_FRAGMENTS)):
            return True
    return words[-1] == "key" and (len(words) == 1 or words[-2] not in DATA_KEY_PREFIXES)


_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/\s@?#]+)@")
_PAIR = re.compile(r"(?P<name>[A-Za-z_][\w.-]*)(?P<sep>\s*=\s*)(?P<q>['\"]?)(?P<val>[^\s'\"&;,)]+)")
_QUOTED = re.compile(r"(?P<q1>['\"])(?P<name>[A-Za-z_][\w.-]*)(?P=q1)(?P<sep>\s*:\s*)(?P<q2>['\"])"
                     r"(?P<val>[^'\"]+)(?P=q2)")
_BEARER = re.compile(r"\b(?P<kind>Bearer|Basic)\s+(?P<val>[A-Za-z0-9._~+/=-]{6,})")


#: Values that stand for a value in usage and help text (``key=value``, ``token=<token>``).
PLACEHOLDER_VALUES = frozenset({"value", "...", "<value>", REDACTED})


def _placeholder(val: str) -> bool:
    """True for a usage text's stand-in value (:data:`PLACEHOLDER_VALUES`, any ``<word>``),
    which holds no secret: ``usage: ... [key=value ...]`` is printed as written."""
    return val.lower() in PLACEHOLDER_VALUES or (len(val) > 2 and val[0] == "<" and val[-1] == ">")


def redact_text(text):
    """``text`` with every secret it carries masked (module docstring); other values as given."""
    if not isinstance(text, str) or not text:
        return text
    out = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    out = _PAIR.sub(lambda m: (f"{m['name']}{m['sep']}{m['q']}{REDACTED}" if is_secret_key(m["name"])
                               and not _placeholder(m["val"]) else m[0]), out)
    out = _QUOTED.sub(lambda m: (f"{m['q1']}{m['name']}{m['q1']}{m['sep']}{m['q2']}{REDACTED}{m['q2']}"
                                 if is_secret_key(m["name"]) else m[0]), out)
    return _BEARER.sub(lambda m: f"{m['kind']} {REDACTED}", out)


def redact(node):
    """A copy of a plain config (dicts, lists, scalars) with every secret masked: the value of
    a secret key (:func:`is_secret_key`) becomes :data:`REDACTED` unless empty; every other
    string goes through :func:`redact_text`."""
    if isinstance(node, dict):
        return {k: (REDACTED if is_secret_key(str(k)) and v not in (None, "", [], {}) else redact(v))
                for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [redact(v) for v in node]
    return redact_text(node)


class RedactingFilter(logging.Filter):
    """A logging filter that masks secrets (:func:`redact_text`) in every record it passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is logged as logging would
            return True
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Attach one :class:`RedactingFilter` to every handler of ``logger`` (the root logger
    when None) and to the logger itself; idempotent."""
    logger = logger or logging.getLogger()
    for target in [logger, *logger.handlers]:
        if not any(isinstance(f, RedactingFilter) for f in target.filters):
            target.addFilter(RedactingFilter())

"""Extract the predicted SQL from raw model output.

Policy (README "Generation"; PolySQL arXiv 2605.07796 section on answer parsing):

1. Reasoning: when the output has ``</think>`` (Qwen/DeepSeek-R1 style), only the text after
   the *last* ``</think>`` is the answer; SQL drafts inside the reasoning are ignored. An
   opened ``<think>`` that is never closed means the answer never came: ``truncated`` when the
   model hit its token limit, else ``no_sql``.
2. Fenced blocks (CommonMark: ``````` or ``~~~``, any language tag: ``sql``, ``sqlite``,
   ``postgresql``, ``mysql``, bare ...): the *last* block whose content starts like a SQL
   statement wins. The language tag is dropped as a whole word, never character-wise (the
   reference implementation's ``[sql]*`` regex turned ```` ```sqlite```` into ``"ite\\nSELECT"``).
   An unterminated final fence means the output was cut: ``truncated``.
3. Fallback when no block holds SQL: a statement anchored at a line start: ``SELECT``/``select``
   (not the English ``Select``) or ``WITH <ident> AS (`` (a bare "with" in prose is not a CTE),
   running to the first ``;`` or blank line. The last such statement wins.
4. Nothing found: ``no_sql``.
5. ``finish_reason == "length"`` always gives ``truncated`` (the model may have gone on to
   replace the answer); the extracted text is still returned for inspection.

Trailing ``;`` (and whitespace) are always stripped, so ``SELECT 1;`` and ``SELECT 1`` give the
same predicted SQL; the engines accept exactly one statement without a terminator.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from polysql_ray.generation.base import GenStatus, Prediction

# Statement starts that make a block's content count as SQL (case-insensitive).
_SQL_START = re.compile(r"^\s*(\(\s*)*(SELECT|WITH)\b", re.IGNORECASE)
_LEADING_COMMENTS = re.compile(r"^(\s*(--[^\n]*|/\*.*?\*/))*", re.DOTALL)
# A CTE head: WITH [RECURSIVE] name [(cols)] AS [[NOT] MATERIALIZED] (
_IDENT = r'(?:"[^"\n]+"|`[^`\n]+`|\[[^\]\n]+\]|[A-Za-z_][\w$]*)'
_CTE_HEAD = (
    r"WITH\s+(?:RECURSIVE\s+)?" + _IDENT + r"\s*(?:\([^()]*\))?\s+AS\s+(?:(?:NOT\s+)?MATERIALIZED\s+)?\("
)
# Fallback anchors: line-start SELECT in all caps or all lower case (not the prose word
# "Select"), or a real CTE head in any case.
_FALLBACK_START = re.compile(
    r"^[ \t]*(?:(?:SELECT|select)\b(?=[ \t]*\S)|(?i:" + _CTE_HEAD + r"))", re.MULTILINE
)
_FENCE_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n]*)$")
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)


@dataclass(frozen=True)
class Extraction:
    """Result of :func:`extract_sql`.

    Attributes:
        sql: the extracted statement without trailing ``;`` ("" when none was found).
        status: ``GenStatus.OK``, ``GenStatus.NO_SQL`` or ``GenStatus.TRUNCATED``.
        method: how it was found: ``fence``, ``fence_open`` (unterminated block),
            ``fallback`` or ``none``.
        reason: a short human-readable note for non-OK statuses ("" when OK).
    """

    sql: str
    status: GenStatus
    method: str
    reason: str = ""


def strip_statement(sql: str) -> str:
    """Trim whitespace and any trailing ``;`` (repeated, possibly space-separated).

    Args:
        sql: one statement's text.

    Returns:
        The statement with no leading/trailing whitespace and no trailing terminator.
    """
    return re.sub(r"[\s;]+$", "", sql).strip()


def _looks_like_sql(text: str) -> bool:
    text = _LEADING_COMMENTS.sub("", text, count=1)
    return bool(_SQL_START.match(text)) or bool(re.match(r"^\s*" + _CTE_HEAD, text, re.I))


@dataclass
class _Block:
    content: str
    closed: bool


def _fenced_blocks(text: str) -> list[_Block]:
    """CommonMark-style fenced blocks in order; the last may be unterminated.

    A one-line ```` ```SELECT 1``` ```` is also accepted. An info string that itself starts
    like SQL (```` ```SELECT a FROM t````) is treated as the first content line.
    """
    blocks: list[_Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group("fence"), m.group("info")
        ch = fence[0]
        # inline: ```SELECT 1```
        if ch == "`" and info.rstrip().endswith(fence) and len(info.strip()) > len(fence):
            content = info.rstrip()[: -len(fence)]
            tagged = re.match(r"^[A-Za-z][\w+-]*\s+(.*)$", content, re.DOTALL)
            if not _looks_like_sql(content) and tagged and _looks_like_sql(tagged.group(1)):
                content = tagged.group(1)  # ```sql SELECT 1```
            blocks.append(_Block(content, True))
            i += 1
            continue
        if ch == "`" and "`" in info:  # CommonMark: backtick info strings cannot hold backticks
            i += 1
            continue
        body: list[str] = []
        if _looks_like_sql(info):
            body.append(info)
        close = re.compile(r"^ {0,3}" + re.escape(ch) + "{" + str(len(fence)) + r",}[ \t]*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            body.append(lines[j])
            j += 1
        blocks.append(_Block("\n".join(body), j < len(lines)))
        i = j + 1
    return blocks


def _fallback(text: str) -> str:
    """The last line-anchored statement, cut at the first ``;`` or blank line."""
    found = ""
    pos = 0
    while True:
        m = _FALLBACK_START.search(text, pos)
        if not m:
            return found
        rest = text[m.start():]
        end = len(rest)
        semi = rest.find(";")
        if semi >= 0:
            end = semi
        blank = re.search(r"\n[ \t]*\n", rest)
        if blank and blank.start() < end:
            end = blank.start()
        found = rest[:end]
        pos = m.start() + max(end, 1)


def extract_sql(text: str | None, finish_reason: str | None = None) -> Extraction:
    """Extract one predicted SQL statement from raw model output.

    Args:
        text: the model's completion text (None is treated as "").
        finish_reason: the server's finish reason (OpenAI/vLLM: ``stop`` | ``length``);
            ``length`` makes the status ``truncated`` whatever was found.

    Returns:
        An :class:`Extraction`. Never raises.
    """
    text = (text or "").replace("\r\n", "\n").replace("\r", "\n")
    length_cut = (finish_reason or "").lower() == "length"

    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    elif _THINK_OPEN.search(text):
        status = GenStatus.TRUNCATED if length_cut else GenStatus.NO_SQL
        return Extraction("", status, "none", "reasoning (<think>) never closed: no answer")

    sql, method, status, reason = "", "none", GenStatus.NO_SQL, "no SQL statement found"
    blocks = _fenced_blocks(text)
    if blocks and not blocks[-1].closed:
        last = blocks[-1]
        sql = strip_statement(last.content) if _looks_like_sql(last.content) else ""
        method, status, reason = "fence_open", GenStatus.TRUNCATED, "unterminated final code fence"
        return Extraction(sql, status, method, reason)
    for block in reversed(blocks):
        if _looks_like_sql(block.content):
            sql, method, status, reason = strip_statement(block.content), "fence", GenStatus.OK, ""
            break
    if not sql:
        found = strip_statement(_fallback(text))
        if found:
            sql, method, status, reason = found, "fallback", GenStatus.OK, ""
    if length_cut:
        return Extraction(sql, GenStatus.TRUNCATED, method, "finish_reason=length")
    return Extraction(sql, status, method, reason)


def prediction_from_output(question_id: str, text: str | None, finish_reason: str | None = None,
                           prompt_tokens: int = 0, completion_tokens: int = 0,
                           latency_s: float = 0.0):
    """Turn one raw model completion into a :class:`~polysql_ray.generation.base.Prediction`.

    ``pred_sql`` is the extracted SQL when the status is OK, else ""; the raw output is
    always kept, and non-OK statuses carry the extraction reason as ``error``.
    """
    ex = extract_sql(text, finish_reason)
    ok = ex.status == GenStatus.OK
    return Prediction(question_id=question_id, pred_sql=ex.sql if ok else "", status=ex.status,
                      raw_output=text or "", error=None if ok else ex.reason,
                      prompt_tokens=int(prompt_tokens), completion_tokens=int(completion_tokens),
                      latency_s=float(latency_s), finish_reason=str(finish_reason or ""))

"""A loopback OpenAI-compatible ``/v1/chat/completions`` server: a protocol stand-in, not a model.

It exists so the ``openai`` generator and the whole generate -> execute -> score pipeline can be
exercised over real HTTP with no GPU, no network and no model weights. Its answers are NOT
model output: for each request it reads the ``CREATE TABLE`` statements of the schema in the
user message, picks the first table whose name occurs in the question (else the first table),
and answers ``SELECT count(*) FROM <that table>`` with the table identifier copied verbatim
from the prompt's DDL (so quoting follows the prompt's dialect), inside a fenced ```sql block.
Same prompt, same answer. Its EX figure measures nothing about text-to-SQL. Judge prompts
(``python -m jobs.judge``) get ``LABEL: <class>`` from a fixed table keyed by the prompt's
evaluation outcome (:func:`answer_judge`).

Protocol: the subset of the OpenAI "Create chat completion" API the generator uses —
``POST /v1/chat/completions`` with ``model`` and ``messages``; the reply carries
``choices[0].message.content``, ``finish_reason: "stop"`` and ``usage`` (whitespace-token
counts). Any other path is 404. Bounded lifetime: it shuts down after ``--lifetime-s``
seconds (default 600) or ``--max-requests`` requests, whichever comes first.

Usage::

    # serve on 127.0.0.1:8765 for at most 10 minutes
    python benchmarks/openai_loopback_server.py --port 8765
    # or: serve on a free port while one command runs (the URL is in $POLYSQL_LOOPBACK_URL),
    # then stop and print the request figures
    python benchmarks/openai_loopback_server.py -- \\
        python -m polysql_ray +sweep=openai_loopback results_dir=/tmp/loopback
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: ``CREATE TABLE <identifier>`` in any of the dialects' DDL renderings ("x", `x`, [x], x).
_CREATE = re.compile(r'CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?("(?:[^"]|"")+"|`[^`]+`|\[[^\]]+\]|[A-Za-z_][\w$]*)',
                     re.IGNORECASE)
_QUESTION = re.compile(r"^Question:\s*(.*)$", re.MULTILINE)


#: Judge prompts (polysql_ray.statistics.taxonomy.build_judge_prompt) carry this line.
_JUDGE_MARK = "Classify the error."
_OUTCOME = re.compile(r"^Evaluation outcome:\s*([A-Za-z_]+)", re.MULTILINE)
#: Stand-in judge: the stored reason code -> the label it answers (a fixed table, not a model).
JUDGE_TABLE = {"pred_schema": "schema_linking_error", "pred_syntax": "dialect_error",
               "values": "filtering_error", "row_count": "aggregation_error",
               "column_count": "schema_linking_error", "order": "invalid_evaluation",
               "pred_runtime": "dialect_error"}


def answer_judge(user_message: str) -> str:
    """The stand-in answer to a judge prompt: some prose, then ``LABEL: <class>`` chosen by
    :data:`JUDGE_TABLE` from the prompt's ``Evaluation outcome`` (``invalid_evaluation``
    otherwise). Deterministic; it exercises the judge job's plumbing, not judgement."""
    m = _OUTCOME.search(user_message)
    label = JUDGE_TABLE.get(m.group(1) if m else "", "invalid_evaluation")
    return f"The prediction differs from the gold.\n**LABEL:** {label}"


def answer_sql(user_message: str) -> str:
    """The deterministic stand-in answer for one prompt (see module docstring).

    Returns ``SELECT count(*) FROM <table>`` for the chosen table, or ``SELECT 1`` when the
    prompt contains no ``CREATE TABLE``.
    """
    # the worked example of guidance levels has its own schema: use the database's section
    schema_part = user_message.split("Database schema", 1)[-1]
    tables = _CREATE.findall(schema_part)
    if not tables:
        return "SELECT 1"
    m = _QUESTION.search(user_message)
    question = (m.group(1) if m else "").lower()
    words = set(re.findall(r"[a-z0-9_]+", question))

    def bare(ident: str) -> str:
        return ident.strip('"`[]').lower()

    for t in tables:
        b = bare(t)
        if b in words or b.rstrip("s") in words or (b + "s") in words:
            return f"SELECT count(*) FROM {t}"
    return f"SELECT count(*) FROM {tables[0]}"


class LoopbackServer:
    """The server on ``127.0.0.1`` in a background thread (a context manager).

    Args:
        port: TCP port (0: a free one, see :attr:`base_url`).
        lifetime_s: shut down after this many seconds (None: only on :meth:`stop`).
        max_requests: shut down after this many chat requests (None: no cap).
        delay_s: seconds each chat answer waits before it is sent, as a model's latency would
            (0: answer at once); lets a test or a demo see generation overlap execution.

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1`` (what the ``openai`` generator's
            ``base_url`` takes).
        requests: chat completion requests answered so far.
    """

    def __init__(self, port: int = 0, lifetime_s: float | None = 600.0, max_requests: int | None = None,
                 delay_s: float = 0.0):
        self.lock = threading.Lock()
        self.delay_s = float(delay_s)
        self.requests = 0
        self.max_requests = max_requests
        self.lifetime_s = lifetime_s
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet: a sweep sends thousands of requests
                pass

            def do_POST(self):  # noqa: N802 - http.server naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"unknown path {self.path}"}})
                    return
                try:
                    body = json.loads(raw)
                    user = [m for m in body["messages"] if m.get("role") == "user"][-1]["content"]
                except (ValueError, KeyError, IndexError, TypeError) as e:
                    self._send(400, {"error": {"message": f"bad request: {e}"}})
                    return
                if outer.delay_s > 0:
                    time.sleep(outer.delay_s)
                content = (answer_judge(user) if _JUDGE_MARK in user
                           else f"```sql\n{answer_sql(user)};\n```")
                n_prompt = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
                n_completion = len(content.split())
                self._send(200, {
                    "id": "loopback", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", "loopback"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_completion,
                              "total_tokens": n_prompt + n_completion},
                })
                with outer.lock:
                    outer.requests += 1
                    done = outer.max_requests is not None and outer.requests >= outer.max_requests
                if done:
                    threading.Thread(target=outer.stop, daemon=True).start()

            def _send(self, code: int, obj: dict) -> None:
                data = json.dumps(obj).encode("utf-8")
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="loopback-openai", daemon=True)
        self._timer: threading.Timer | None = None
        self._stopped = threading.Event()

    def start(self) -> "LoopbackServer":
        """Start serving in a daemon thread; arms the lifetime timer."""
        self._thread.start()
        if self.lifetime_s:
            self._timer = threading.Timer(self.lifetime_s, self.stop)
            self._timer.daemon = True
            self._timer.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._timer:
            self._timer.cancel()
        self.httpd.shutdown()
        self.httpd.server_close()

    def wait(self) -> None:
        """Block until the server stops (lifetime, request cap, or :meth:`stop`)."""
        self._stopped.wait()

    def __enter__(self) -> "LoopbackServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """Command line: serve, or serve while one command runs (after ``--``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, cmd = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0 if cmd else 8765)
    ap.add_argument("--lifetime-s", type=float, default=600.0)
    ap.add_argument("--max-requests", type=int, default=None)
    ap.add_argument("--delay-s", type=float, default=0.0, help="latency of each answer (seconds)")
    args = ap.parse_args(argv)
    server = LoopbackServer(args.port, args.lifetime_s, args.max_requests, args.delay_s).start()
    print(f"loopback OpenAI-compatible stand-in on {server.base_url} "
          f"(lifetime {args.lifetime_s:g}s; answers are not model output)", file=sys.stderr, flush=True)
    if not cmd:
        server.wait()
        print(f"served {server.requests} requests", file=sys.stderr)
        return 0
    t0 = time.perf_counter()
    try:
        rc = subprocess.call(cmd, env={**os.environ, "POLYSQL_LOOPBACK_URL": server.base_url})
    finally:
        server.stop()
    print(f"served {server.requests} chat requests while the command ran "
          f"({time.perf_counter() - t0:.1f}s, exit {rc})", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())

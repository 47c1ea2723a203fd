"""The ``openai`` generator against a real HTTP server on 127.0.0.1 (no mocks)."""
from __future__ import annotations

import json
import logging
import socket
import sqlite3
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from polysql_ray.datasets.example import Example, SourceDatabase
from polysql_ray.generation.base import GenStatus
from polysql_ray.generation.openai import OpenAIGenerator, RetryPolicy
from polysql_ray.generation.prompts import Sampling, prompt_for

SECRET = "sk-test-NEVER-LOG-THIS-1234"


class FakeServer:
    """A tiny OpenAI-compatible /v1/chat/completions server with scripted behaviour."""

    def __init__(self):
        self.lock = threading.Lock()
        self.fail_first = 0          # answer 503 to this many requests first
        self.always_status = None    # answer every request with this HTTP status
        self.reply = "Here it is:\n```sql\nSELECT count(*) FROM singer;\n```"
        self.finish_reason = "stop"
        self.gate: tuple[int, int] | None = None  # (k, n): hold each request until k are in
        #                                            flight or all n have arrived (a barrier)
        self.arrived = threading.Condition(self.lock)
        self.requests: list[dict] = []
        self.auth: list[str | None] = []
        self.inflight = 0
        self.max_inflight = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep pytest output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(body)
                    server.auth.append(self.headers.get("Authorization"))
                    server.inflight += 1
                    server.max_inflight = max(server.max_inflight, server.inflight)
                    server.arrived.notify_all()
                    fail = server.always_status
                    if fail is None and server.fail_first > 0:
                        server.fail_first -= 1
                        fail = 503
                try:
                    if server.gate is not None:
                        k, n = server.gate
                        with server.lock:  # a generous bound: the client's requests are the signal
                            server.arrived.wait_for(lambda: server.inflight >= k or len(server.requests) >= n,
                                                    timeout=600)
                    if self.path != "/v1/chat/completions":
                        fail = 404
                    if fail is not None:
                        self._send(fail, {"error": {"message": "scripted failure"}})
                        return
                    user = body["messages"][-1]["content"]
                    self._send(200, {
                        "id": "x", "object": "chat.completion", "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": server.finish_reason,
                                     "message": {"role": "assistant", "content": server.reply}}],
                        "usage": {"prompt_tokens": len(user.split()), "completion_tokens": 11,
                                  "total_tokens": len(user.split()) + 11},
                    })
                finally:
                    with server.lock:
                        server.inflight -= 1

            def _send(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


@pytest.fixture
def examples(tmp_path):
    db = tmp_path / "concert.sqlite"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE singer ("Singer_ID" INTEGER PRIMARY KEY, "Name" TEXT, "Age" INT);
        INSERT INTO singer VALUES (1, 'Joe', 52), (2, 'Tim', 32);
    """)
    con.commit()
    con.close()
    src = SourceDatabase("toy", "concert", "sqlite", str(db))
    return [Example("toy", str(i), "concert", f"How many singers are older than {i}?", "",
                    "SELECT count(*) FROM singer", "sqlite", "sqlite", src, position=i) for i in range(5)]


# timeout_s: long enough that load never times a request out (a retry would change the counts)
FAST = RetryPolicy(max_retries=3, backoff_s=0.01, backoff_max_s=0.05, jitter=0.0, timeout_s=600)


def make(url, **kw):
    kw.setdefault("retry", FAST)
    return OpenAIGenerator(model="toy-model", model_id="Qwen/Qwen2.5-Coder-7B-Instruct", base_url=url,
                           api_key_env="POLYSQL_TEST_KEY", sampling=Sampling(max_tokens=64, seed=7), **kw)


def test_generates_and_records_usage(server, examples, monkeypatch):
    monkeypatch.setenv("POLYSQL_TEST_KEY", SECRET)
    preds = make(server.url, concurrency=3).generate(examples, "postgres", "12")
    assert [p.question_id for p in preds] == [e.question_id for e in examples]
    assert all(p.status == GenStatus.OK for p in preds)
    assert all(p.pred_sql == "SELECT count(*) FROM singer" for p in preds)
    assert all(p.completion_tokens == 11 and p.prompt_tokens > 20 for p in preds)
    assert all(p.latency_s > 0 and "```sql" in p.raw_output for p in preds)
    # the request carries the rendered prompt, sampling and the key (from the env var)
    body = server.requests[0]
    assert body["model"] == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert body["temperature"] == 0.0 and body["max_tokens"] == 64 and body["seed"] == 7
    sent = {r["messages"][-1]["content"] for r in server.requests}
    assert prompt_for(examples[0], "postgres", "12").messages[-1]["content"] in sent
    assert 'CREATE TABLE singer (' in body["messages"][-1]["content"]  # the replica's name, unquoted
    assert server.auth == [f"Bearer {SECRET}"] * len(examples)


def test_retries_503_twice_then_succeeds(server, examples, caplog):
    server.fail_first = 2
    with caplog.at_level(logging.WARNING):
        preds = make(server.url, concurrency=1).generate(examples[:1], "duckdb", "11")
    assert preds[0].status == GenStatus.OK, preds[0].error
    assert len(server.requests) == 3
    assert "retry" in caplog.text


def test_server_stays_503_gives_error_after_retries(server, examples, monkeypatch, caplog):
    monkeypatch.setenv("POLYSQL_TEST_KEY", SECRET)
    server.always_status = 503
    gen = make(server.url, concurrency=2)
    with caplog.at_level(logging.DEBUG):
        preds = gen.generate(examples[:2], "mysql", "21")
    assert [p.status for p in preds] == [GenStatus.ERROR, GenStatus.ERROR]
    assert "HTTP 503" in preds[0].error and "4 attempt" in preds[0].error
    assert len(server.requests) == 2 * (FAST.max_retries + 1)
    # the key is never logged, stored or echoed
    assert SECRET not in caplog.text and SECRET not in repr(gen) and SECRET not in str(vars(gen))
    assert all(SECRET not in (p.error or "") for p in preds)


def test_client_error_is_not_retried(server, examples):
    server.always_status = 400
    preds = make(server.url).generate(examples[:1], "sqlite", "11")
    assert preds[0].status == GenStatus.ERROR and "HTTP 400" in preds[0].error
    assert len(server.requests) == 1


def test_dead_server_connection_refused(examples):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens on this port now
    preds = make(f"http://127.0.0.1:{port}/v1").generate(examples[:2], "sqlite", "11")
    assert all(p.status == GenStatus.ERROR for p in preds)
    assert "cannot reach" in preds[0].error and "after 4 attempt" in preds[0].error


def test_concurrency_is_bounded(server, examples):
    """Each request is held until two are in flight (or all have arrived): the client must
    reach its bound of 2, and never pass it."""
    server.gate = (2, len(examples))
    preds = make(server.url, concurrency=2).generate(examples, "sqlite", "11")
    assert all(p.status == GenStatus.OK for p in preds)
    assert server.max_inflight == 2 and len(server.requests) == len(examples)


def test_truncated_and_no_sql_statuses(server, examples):
    server.reply, server.finish_reason = "```sql\nSELECT name FROM singer WHERE", "length"
    p = make(server.url).generate(examples[:1], "sqlite", "11")[0]
    assert p.status == GenStatus.TRUNCATED and p.pred_sql == "" and p.raw_output.startswith("```sql")
    server.reply, server.finish_reason = "With this schema I cannot answer.", "stop"
    p = make(server.url).generate(examples[:1], "sqlite", "11")[0]
    assert p.status == GenStatus.NO_SQL and p.completion_tokens == 11


def test_missing_database_is_error_without_request(server, examples, tmp_path):
    ex = examples[0]
    gone = SourceDatabase("toy", "gone", "sqlite", str(tmp_path / "gone.sqlite"), exists=False)
    bad = Example(ex.dataset, "99", "gone", ex.question, "", ex.gold_sql, "sqlite", "sqlite", gone,
                  gold_error="database gone is missing")
    preds = make(server.url).generate([bad, ex], "sqlite", "11")
    assert preds[0].status == GenStatus.ERROR and "missing" in preds[0].error
    assert preds[1].status == GenStatus.OK and len(server.requests) == 1


def test_fingerprint_changes_with_settings(server):
    a = make(server.url)
    assert a.fingerprint() == make(server.url).fingerprint()
    b = OpenAIGenerator("toy-model", "Qwen/Qwen2.5-Coder-7B-Instruct", server.url,
                        sampling=Sampling(max_tokens=64, seed=8))
    assert a.fingerprint() != b.fingerprint()
    assert "Qwen/Qwen2.5-Coder-7B-Instruct" in a.fingerprint()


def test_bad_level_raises(server, examples):
    with pytest.raises(ValueError):
        make(server.url).generate(examples, "sqlite", "31")


def test_no_key_sends_no_authorization_even_with_openai_api_key_set(server, examples, monkeypatch):
    """``api_key_env`` unset: no header, and the SDK's own OPENAI_API_KEY fallback is not used."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    gen = OpenAIGenerator(model="toy-model", model_id="m", base_url=server.url, api_key_env=None, retry=FAST)
    assert gen.generate(examples[:1], "sqlite", "11")[0].status == GenStatus.OK
    monkeypatch.delenv("POLYSQL_TEST_KEY", raising=False)
    assert make(server.url).generate(examples[:1], "sqlite", "11")[0].status == GenStatus.OK
    assert server.auth == [None, None]


def test_url_credentials_never_reach_the_error(examples, caplog):
    """A dead endpoint whose base_url carries user:password: the error names the endpoint with
    the credentials masked (polysql_ray.redaction), in the stored error and in the log."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with caplog.at_level(logging.WARNING):
        p = make(f"http://alice:{SECRET}@127.0.0.1:{port}/v1").generate(examples[:1], "sqlite", "11")[0]
    assert p.status == GenStatus.ERROR and "cannot reach http://<redacted>@127.0.0.1" in p.error
    assert SECRET not in p.error and SECRET not in caplog.text and "retry" in caplog.text

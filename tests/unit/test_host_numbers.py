"""Numbers a host sends are finite or refused (issue 23, class 9): a router ``/metrics`` counter of ``inf`` or
``nan`` made ``int()`` raise in the middle of a rollout; ``1e400`` parses as inf. Helper answers with such
numbers are no answer, and the rollout's request count is "unknown"."""

from __future__ import annotations

import http.server
import json
import math
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from provision.pd.rollout import request_count
from provision.transport.base import CommandResult, host_json

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("text", ['{"requests": Infinity}', '{"requests": -Infinity}', '{"requests": NaN}',
                                  '{"requests": 1e400}', '{"a": [' + '[' * 200 + ']' * 200 + ']}'])  # fmt: skip
def test_host_json_refuses_non_finite_numbers_and_deep_nesting(text: str) -> None:
    with pytest.raises(ValueError):
        host_json(text)
    assert CommandResult(0, f"noise\n{text}\n", "", "x").last_json() is None


def test_host_json_takes_plain_answers() -> None:
    assert host_json('{"ok": true, "n": 1.5, "i": 3, "l": [null, "x"]}') == {
        "ok": True,
        "n": 1.5,
        "i": 3,
        "l": [None, "x"],
    }


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, -1, "12", None, True, [3]])
def test_a_request_count_that_is_not_a_count_is_unknown(value: object) -> None:
    assert request_count(value) is None


def test_a_request_count_is_an_int() -> None:
    assert request_count(12.0) == 12 and request_count(0) == 0


@pytest.fixture
def metrics_server() -> Iterator[str]:
    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'smg_router_requests_total{path="/generate"} +Inf\n'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: counter
      pd_rollout_step: {{action: router_metrics, request: {{metrics_url: "{url}"}}, timeout: 10}}
      register: r
      ignore_errors: true
    - name: after
      debug: {{msg: "requests={{{{ r.requests | default('unknown') }}}}"}}
"""


def test_an_infinite_router_counter_is_no_answer_not_a_crash(tmp_path: Path, metrics_server: str) -> None:
    (tmp_path / "inv.yml").write_text(
        "all:\n  vars: {ansible_connection: local, ansible_python_interpreter: "
        + sys.executable
        + "}\n  hosts: {one: }\n"
    )
    (tmp_path / "pb.yml").write_text(PLAYBOOK.format(url=metrics_server))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "provision", "run", "pb.yml", "-i", "inv.yml", "--json"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr
    doc = json.loads(run.stdout)
    counter = doc["plays"][0]["tasks"][0]["hosts"]["one"]
    assert counter["failed"] and "requests" not in counter, counter
    assert doc["plays"][0]["tasks"][1]["hosts"]["one"]["msg"] == "requests=unknown"

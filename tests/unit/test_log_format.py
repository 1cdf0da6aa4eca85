"""Log lines for a person (text) or a machine (JSON lines): NETMAP_LOG_FORMAT, else the tty."""

from __future__ import annotations

import io
import json
import logging

from app import observability
from app.observability import HumanLineFormatter, JsonLineFormatter, StderrHandler


def _record(event: str, level: int = logging.INFO, **fields) -> logging.LogRecord:
    record = logging.LogRecord("netmap.events", level, __file__, 1, event, None, None)
    record.netmap_event = event
    record.netmap_fields = fields
    return record


def test_text_lines_carry_time_level_event_and_fields():
    line = HumanLineFormatter().format(
        _record("RunnerRestarted", logging.WARNING, pid=12, reason="exit code 9", ok=True)
    )
    clock, level, rest = line.split(None, 2)
    assert len(clock) == 8 and clock.count(":") == 2
    assert level == "warning"
    assert rest == 'RunnerRestarted pid=12 reason="exit code 9" ok=true'


def test_library_records_show_their_logger_and_message():
    record = logging.LogRecord("gunicorn.error", logging.INFO, __file__, 1, "Listening", None, None)
    assert HumanLineFormatter().format(record).endswith("info    gunicorn.error: Listening")


def test_the_format_follows_the_setting_and_the_terminal(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("NETMAP_LOG_FORMAT", "auto")
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert observability.log_format_in_use() == "json"
    monkeypatch.setattr("sys.stderr", Tty())
    assert observability.log_format_in_use() == "text"
    monkeypatch.setenv("NETMAP_LOG_FORMAT", "json")
    assert observability.log_format_in_use() == "json"
    assert isinstance(observability.line_formatter(), JsonLineFormatter)
    monkeypatch.setenv("NETMAP_LOG_FORMAT", "text")
    assert isinstance(observability.line_formatter(), HumanLineFormatter)


def test_routine_successes_are_left_out_of_text_but_kept_in_json(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    handler = StderrHandler()
    handler.setFormatter(HumanLineFormatter())
    handler.emit(_record("PeriodicJobCompleted", job="x", success=True))
    handler.emit(_record("PeriodicJobCompleted", job="y", success=False))
    assert "job=x" not in stream.getvalue() and "job=y" in stream.getvalue()
    handler.setFormatter(JsonLineFormatter())
    handler.emit(_record("PeriodicJobCompleted", job="z", success=True))
    assert json.loads(stream.getvalue().splitlines()[-1])["job"] == "z"


def test_the_shipped_nginx_log_format_is_what_the_rollups_parse():
    """deploy/nginx/netmap-traffic-log.conf, filled in as nginx would, parses as a log line."""
    import re

    from app.traffic.logline import parse_line
    from tests.support.processes import PROJECT_ROOT

    conf = (PROJECT_ROOT / "deploy" / "nginx" / "netmap-traffic-log.conf").read_text()
    body = "".join(re.findall(r"'([^']*)'", conf.split("log_format netmap_traffic", 1)[1]))
    values = {
        "remote_addr": "203.0.113.7",
        "remote_user": "-",
        "time_local": "02/Dec/2026:05:00:01 +0000",
        "request": "GET /index.html HTTP/1.1",
        "status": "200",
        "body_bytes_sent": "1500",
        "http_referer": "-",
        "http_user_agent": "curl/8.0",
        "request_length": "420",
        "bytes_sent": "1580",
    }
    line = re.sub(r"\$([a-z_]+)", lambda m: values[m.group(1)], body)
    parsed = parse_line(line.encode())
    assert parsed is not None
    assert parsed.request_bytes == 420 and parsed.response_bytes == 1580

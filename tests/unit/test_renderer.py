"""The pure renderer: sandbox, sanitising, CSS inlining and output validation."""

from __future__ import annotations

import copy

import pytest

from app.renderer.contract import (
    RenderRejected,
    check_self_test_output,
    self_test_input,
    validate_output,
)
from app.renderer.render import render


def with_template(html: str = "<p>ok</p>", subject: str = "s", version: str = "v1") -> dict:
    payload = self_test_input()
    payload["template"] = {"subject": subject, "html": html, "version": version}
    return payload


def test_self_test_sample_renders_as_expected():
    output = render(self_test_input())
    assert check_self_test_output(output) is None
    assert output["subject"] == "[netmap] self-test: 3 open ports"
    assert '<h1 style="color: #123456;">self-test</h1>' in output["html"]
    assert output["images_used"] == ["ports-chart"]


@pytest.mark.parametrize(
    "html",
    [
        "{{ ''.__class__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ ''|attr('__class__') }}",
        "{{ task|attr('__init__') }}",
        "{{ '{0.__class__}'.format(task) }}",
        "{{ '{a.__class__}'.format_map({'a': task}) }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ 'a' * 100000000 }}",
        "{{ 2 ** 100000 }}",
        "{% for i in range(10000000) %}{% endfor %}",
        "{{ task.update({'x': 1}) }}",
    ],
)
def test_sandbox_escapes_and_resource_abuse_are_rejected(html):
    with pytest.raises(RenderRejected) as caught:
        render(with_template(html))
    assert caught.value.code in {"template_unsafe", "template_error"}


def test_undefined_variables_are_errors_not_blank_reports():
    with pytest.raises(RenderRejected) as caught:
        render(with_template("{{ no_such_value }}"))
    assert caught.value.code == "template_error"
    assert render(with_template("{{ no_such_value | default('n/a') }}"))["html"].count("n/a") == 1


def test_html_is_sanitised_before_css_is_inlined():
    html = (
        "<style>p { color: red } .x { font-weight: bold }</style>"
        '<p class="x" onclick="steal()">hi</p>'
        "<script>alert(1)</script>"
        '<a href="javascript:alert(1)">j</a>'
        '<link rel="stylesheet" href="https://example.invalid/x.css">'
        '<img src="cid:chart" onerror="x()">'
        "<iframe src='https://example.invalid'></iframe>"
    )
    output = render(with_template(html))["html"]
    assert "onclick" not in output and "onerror" not in output
    assert "<script" not in output and "alert(1)" not in output
    assert "javascript:" not in output
    assert "<iframe" not in output and "<link" not in output and "<style" not in output
    assert 'style="color: red;font-weight: bold;"' in output
    assert 'src="cid:chart"' in output


def test_context_values_are_escaped_in_html_but_not_in_the_subject():
    payload = with_template("<p>{{ note }}</p>", subject="{{ note }} & more")
    output = render(payload)
    assert "&lt;script&gt;" in output["html"]
    assert output["subject"] == "<script>alert(1)</script> & more"


def test_subject_is_one_line():
    output = render(with_template(subject="line one\nline two\r\n  three"))
    assert output["subject"] == "line one line two three"
    with pytest.raises(RenderRejected):
        render(with_template(subject="   "))


def test_unknown_image_token_is_a_template_error_and_unused_images_are_not_reported():
    with pytest.raises(RenderRejected, match="unknown image"):
        render(with_template('<img src="{{ image("nope") }}">'))
    assert render(with_template("<p>no images</p>"))["images_used"] == []


def test_output_validation_checks_version_echo_size_and_images():
    payload = with_template()
    output = render(payload)
    validate_output(payload, output)
    for change in (
        {"template_version": "other"},
        {"html": "x" * (600 * 1024)},
        {"images_used": ["not-given"]},
        {"subject": "a\nb"},
        {"subject": "x" * 300},
    ):
        bad = {**copy.deepcopy(output), **change}
        with pytest.raises(RenderRejected):
            validate_output(payload, bad)


def test_oversized_output_is_rejected():
    with pytest.raises(RenderRejected):
        render(with_template("{% for i in range(90000) %}<p>row {{ i }}</p>{% endfor %}"))


def test_output_is_capped_while_rendering_not_after():
    """200 MB of output would be built before the old size check: now the render stops as
    soon as the output passes the cap."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(RenderRejected) as caught:
            render(with_template("{% for i in range(2000) %}{{ 'x' * 99999 }}{% endfor %}"))
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.code == "output_too_large"
    assert "while rendering" in caught.value.message
    assert peak < 50 * 1024 * 1024


def test_rendering_has_a_time_budget(monkeypatch):
    import app.renderer.render as module

    monkeypatch.setattr(module, "RENDER_TIME_BUDGET_SECONDS", 0.5)
    loops = "{% for i in range(100000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}"
    with pytest.raises(RenderRejected) as caught:
        render(with_template(loops))
    assert caught.value.code == "render_timeout"
    assert "longer than 0.5s" in caught.value.message
    # The timer is gone afterwards: a normal render is not interrupted later.
    import signal

    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_the_time_budget_holds_off_the_main_thread(monkeypatch):
    import threading

    import app.renderer.render as module

    monkeypatch.setattr(module, "RENDER_TIME_BUDGET_SECONDS", 0.3)
    outcome: list = []

    def run():
        try:
            render(
                with_template(
                    "{% for i in range(100000) %}{% for j in range(300) %}{% endfor %}"
                    "{{ i % 2 }}{% endfor %}"
                )
            )
        except RenderRejected as exc:
            outcome.append(exc.code)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=120)
    assert outcome == ["render_timeout"]


def test_a_loop_that_writes_nothing_is_stopped_off_the_main_thread(monkeypatch):
    # The builtin renderer runs in the runner's threads, where no signal can stop a
    # render: nested loops with no output used to spin for minutes past the budget.
    import threading
    import time

    import app.renderer.render as module

    monkeypatch.setattr(module, "RENDER_TIME_BUDGET_SECONDS", 0.3)
    silent = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    outcome: list = []

    def run():
        started = time.monotonic()
        try:
            render(with_template(silent))
        except RenderRejected as exc:
            outcome.append((exc.code, time.monotonic() - started))
        # The thread goes on, and a later render in it is not interrupted by the
        # watchdog of the earlier one.
        monkeypatch.setattr(module, "RENDER_TIME_BUDGET_SECONDS", 30.0)
        result = render(with_template("{% for i in range(20000) %}{% endfor %}ok"))
        time.sleep(0.5)
        outcome.append(result["html"])

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert outcome[0][0] == "render_timeout"
    assert outcome[0][1] < 20
    assert "ok" in outcome[1]


def test_a_render_inside_its_budget_leaves_no_timeout_behind(monkeypatch):
    import threading
    import time

    import app.renderer.render as module

    monkeypatch.setattr(module, "RENDER_TIME_BUDGET_SECONDS", 0.2)
    outcome: list = []

    def run():
        outcome.append(render(with_template("fine"))["html"])
        time.sleep(0.5)  # past the budget: a stray timeout would land in this sleep
        outcome.append("after")

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    assert outcome[-1] == "after"
    assert "fine" in outcome[0]


@pytest.mark.parametrize(
    ("endpoints", "words"), [(1, "1 endpoint, 1 new"), (2, "2 endpoints, 1 new")]
)
def test_the_default_subject_counts_endpoints_in_words(endpoints, words):
    from app.reports.templates import DEFAULT_SUBJECT

    payload = with_template(subject=DEFAULT_SUBJECT)
    payload["context"] = {
        "report": {"name": "weekly"},
        "stats": {"endpoints": endpoints, "new_endpoints": 1},
        "period": {"label": "this week"},
    }
    assert render(payload)["subject"] == f"[netmap] weekly: {words} (this week)"


def test_a_timeout_lost_on_the_way_is_raised_again():
    # A timeout that lands in a garbage-collector callback is dropped as "unraisable":
    # one raise alone would leave a silent loop spinning. Here the first is swallowed.
    import threading
    import time

    import app.renderer.render as module

    outcome: list = []

    def run():
        swallowed = 0
        try:
            with module._thread_time_budget(0.1):
                while True:
                    try:
                        while True:
                            pass
                    except module._OutOfTime:
                        swallowed += 1
                        if swallowed > 1:
                            raise
        except module._OutOfTime:
            outcome.append(swallowed)
        time.sleep(module.RAISE_AGAIN_SECONDS * 3)  # none lands once the block is left
        outcome.append("after")

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert outcome == [2, "after"]

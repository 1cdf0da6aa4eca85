// netmap console: small enhancements only; every page works without this file.
// 1. A task page with work in flight refreshes its numbers from the JSON API (no reload),
//    its latest run's row, and "Run now" (disabled while a run is active).
// 2. Forms with data-confirm ask before submitting (revoke, disable).
(function () {
  "use strict";

  var POLL_MS = 1500;

  function setText(node, value) {
    var text = value === null || value === undefined ? "" : String(value);
    if (node.textContent !== text) { node.textContent = text; }
  }

  // The same words as the server's `asset_view` filter (app/web/__init__.py).
  var ASSET_VIEW = {
    pending: "waiting to be published", running: "being published",
    retrying: "publishing (retrying)", ready: "published", not_started: "not started yet",
    not_applicable: "nothing to publish"
  };

  function inFlight(task) {
    return task.status === "queued" || task.status === "running" ||
      ["pending", "running", "retrying"].indexOf(task.projection_status) >= 0;
  }

  function updateTask(section, task) {
    section.querySelectorAll("[data-field]").forEach(function (node) {
      var name = node.getAttribute("data-field");
      var value = task[name];
      if (name === "finished_at") { value = whenText(value); }
      if (name === "projection_status") { value = ASSET_VIEW[value] || value; }
      setText(node, value);
      if (name === "status") { node.className = "status status-" + task.status; }
    });
    var counts = task.counts || {};
    var executions = counts.executions || {};
    section.querySelectorAll("[data-count]").forEach(function (node) {
      var name = node.getAttribute("data-count");
      setText(node, name in executions ? executions[name] : counts[name]);
    });
  }

  function whenText(value) {
    // The server's `when` filter: 2026-11-30 18:04:05Z.
    return value ? value.replace("T", " ").replace(/\..*$|\+00:00$/, "") + "Z" : "";
  }

  function counted(n, noun) {
    // The server's `counted` filter: "1 endpoint", "2000 endpoints".
    var value = n || 0;
    return value + " " + noun + (value === 1 ? "" : "s");
  }

  function updateLatestRun(task) {
    var run = task.latest_run;
    if (!run) { return; }
    var active = run.status === "queued" || run.status === "running";
    var counts = run.counts || {};
    document.querySelectorAll("[data-latest-run]").forEach(function (node) {
      var name = node.getAttribute("data-latest-run");
      if (name === "status") { setText(node, run.status); node.className = "status status-" + run.status; }
      if (name === "counts") {
        setText(node, counted(counts.endpoints, "endpoint") + ", " + counted(counts.observations, "observation"));
      }
    });
    var row = document.querySelector('tr[data-run-id="' + run.id + '"]');
    if (row) {
      row.querySelectorAll("[data-field]").forEach(function (cell) {
        var name = cell.getAttribute("data-field");
        if (name === "status") { setText(cell, run.status); cell.className = "status status-" + run.status; }
        if (name === "started_at") { setText(cell, whenText(run.started_at)); }
        if (name === "finished_at") { setText(cell, whenText(run.finished_at)); }
        if (name === "endpoints") { setText(cell, (run.counts || {}).endpoints); }
      });
      var cancel = row.querySelector("form[data-run-cancel]");
      if (cancel && !active) { cancel.remove(); }
    }
    var button = document.getElementById("run-now-button");
    if (button && button.getAttribute("data-scan") === "true") {
      button.disabled = active;
      if (active) { button.title = button.getAttribute("data-active-title"); } else { button.removeAttribute("title"); }
    }
  }

  function updateExecutions(items) {
    items.forEach(function (execution) {
      var row = document.querySelector('tr[data-execution-id="' + execution.id + '"]');
      if (!row) { return; }
      row.querySelectorAll("[data-field]").forEach(function (cell) {
        var name = cell.getAttribute("data-field");
        var value = execution[name];
        if (name === "attempts") { value = execution.attempts + "/" + execution.max_attempts; }
        if (name === "projection_status") { value = ASSET_VIEW[value] || value; }
        setText(cell, value);
      });
    });
  }

  function poll(section) {
    var taskUrl = section.getAttribute("data-task-url");
    var executionsUrl = section.getAttribute("data-executions-url");
    var note = document.getElementById("live-note");
    function tick() {
      fetch(taskUrl, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (response) { if (!response.ok) { throw new Error(response.status); } return response.json(); })
        .then(function (body) {
          updateTask(section, body.task);
          updateLatestRun(body.task);
          return fetch(executionsUrl, { credentials: "same-origin" })
            .then(function (response) { return response.ok ? response.json() : { items: [] }; })
            .then(function (page) {
              updateExecutions(page.items || []);
              if (inFlight(body.task)) {
                window.setTimeout(tick, POLL_MS);
              } else {
                section.setAttribute("data-in-flight", "false");
                // The run's row and status follow it live; its change counts and the
                // schedule's next times come with a reload, which is said rather than implied.
                if (note) { setText(note, "The work has finished: reload the page for its changes."); }
              }
            });
        })
        .catch(function () {
          if (note) { setText(note, "Live refresh paused (connection problem); reload to retry."); }
        });
    }
    window.setTimeout(tick, POLL_MS);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var section = document.getElementById("task-live");
    if (section && section.getAttribute("data-in-flight") === "true") { poll(section); }
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        if (!window.confirm(form.getAttribute("data-confirm"))) { event.preventDefault(); }
      });
    });
  });
})();

// Factory Memory: live updates from the event stream (GET /api/v1/events/stream).
// Pages work without it: the gate panel still polls while checking, and a reload shows
// everything. Served under WSGI the stream answers 501 and EventSource gives up quietly.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  var kind = live.getAttribute("data-live-kind");
  var key = live.getAttribute("data-live-key");
  var source = new EventSource(live.getAttribute("data-live-url"));
  // The stream answers once it is listening: from here on nothing is missed.
  source.addEventListener("open", function () { live.setAttribute("data-open", "1"); });
  var TASK_TYPES = ["task.claimed", "attempt.submitted", "attempt.gates_failed", "task.in_review",
    "task.approved", "task.rejected", "task.failed", "task.blocked", "task.released", "task.unblocked",
    "task.reopened", "task.cancelled", "lease.expired", "task.landed", "landing.failed",
    "task.dequeued"];
  var GATE_TYPES = ["gate.finished", "runner.finished"];
  var QUEUE_TYPES = ["task.in_review", "task.approved", "task.rejected", "task.failed",
    "task.cancelled"];
  var LANDING_TYPES = ["task.approved", "task.landed", "landing.failed", "task.dequeued"];

  // A reviewer halfway through a reason or a verdict per criterion must not lose it to a refresh.
  var marked = false;
  document.addEventListener("change", function (event) {
    if (event.target.matches && event.target.matches("#main input[type=radio]")) marked = true;
  });
  function editing() {
    var fields = document.querySelectorAll("#main textarea, #main input[type=text]");
    return marked || Array.prototype.some.call(fields, function (f) { return f.value.trim() !== ""; });
  }

  function notice(payload) {
    live.textContent = "";
    var text = payload.data.key + ": " + payload.type.replace(".", " ") +
      (payload.actor ? " by " + payload.actor : "") + ". ";
    live.appendChild(document.createTextNode(text));
    var link = document.createElement("a");
    link.href = window.location.href;
    link.textContent = "Reload to see it";
    live.appendChild(link);
    live.className = "notice";
    live.hidden = false;
  }

  function onTask(event) {
    var payload = JSON.parse(event.data);
    if (payload.data.key !== key) return;
    if (GATE_TYPES.indexOf(event.type) >= 0) {
      var panel = document.getElementById("gate-runs");
      if (panel && panel.getAttribute("hx-get") && window.htmx) window.htmx.trigger(panel, "factory:refresh");
      return;
    }
    if (editing()) notice(payload);
    else window.location.reload();
  }

  function onQueue() {
    if (!window.htmx) return;
    window.htmx.ajax("GET", window.location.href, { target: "#queue", select: "#queue", swap: "outerHTML" });
  }

  // The landing page swaps its queue and batches in place, unless a manager is typing a reason.
  function onLanding(event) {
    if (editing()) { notice(JSON.parse(event.data)); return; }
    if (!window.htmx) return;
    window.htmx.ajax("GET", window.location.href, { target: "#landing", select: "#landing", swap: "outerHTML" });
  }

  if (kind === "task") {
    TASK_TYPES.concat(GATE_TYPES).forEach(function (t) { source.addEventListener(t, onTask); });
  } else if (kind === "queue") {
    QUEUE_TYPES.forEach(function (t) { source.addEventListener(t, onQueue); });
  } else if (kind === "landing") {
    LANDING_TYPES.forEach(function (t) { source.addEventListener(t, onLanding); });
  }
  window.addEventListener("beforeunload", function () { source.close(); });
})();

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
    "task.dequeued", "task.withdrawn", "landing.reverted"];
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
    else reloadKeepingFocus();
  }

  // Focus is never lost to a live update: a swap puts it back on the same link or field, or
  // on the swapped region when that is gone; a reload puts it back on the same field.
  function focusKey(el) {
    if (!el || el === document.body || !el.closest("#main")) return null;
    if (el.id) return "#" + CSS.escape(el.id);
    if (el.getAttribute("href")) return el.tagName.toLowerCase() + '[href="' + CSS.escape(el.getAttribute("href")) + '"]';
    if (el.name) return el.tagName.toLowerCase() + '[name="' + CSS.escape(el.name) + '"]';
    return null;
  }
  function swapKeepingFocus(target) {
    var region = document.querySelector(target);
    var had = document.activeElement;
    var inside = region && had && region.contains(had);
    var again = inside ? focusKey(had) : null;
    window.htmx.ajax("GET", window.location.href, { target: target, select: target, swap: "outerHTML" })
      .then(function () {
        if (!inside) return;
        var found = again && document.querySelector(again);
        if (!found) { found = document.querySelector(target); if (found) found.tabIndex = -1; }
        if (found) found.focus();
      });
  }
  function reloadKeepingFocus() {
    var again = focusKey(document.activeElement);
    try { if (again) window.sessionStorage.setItem("factory:focus", again); } catch (e) { /* private mode */ }
    window.location.reload();
  }
  try {
    var back = window.sessionStorage.getItem("factory:focus");
    window.sessionStorage.removeItem("factory:focus");
    var el = back && document.querySelector(back);
    if (el) el.focus();
  } catch (e) { /* private mode */ }

  function onQueue() {
    if (!window.htmx) return;
    swapKeepingFocus("#queue");
  }

  // The landing page swaps its queue and batches in place, unless a manager is typing a reason.
  function onLanding(event) {
    if (editing()) { notice(JSON.parse(event.data)); return; }
    if (!window.htmx) return;
    swapKeepingFocus("#landing");
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

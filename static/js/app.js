// Factory Memory: keyboard shortcuts. Every page works without this file.
(function () {
  "use strict";
  function typing(event) {
    var tag = (event.target.tagName || "").toLowerCase();
    return tag === "input" || tag === "textarea" || tag === "select" || event.target.isContentEditable;
  }
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event)) return;
    var key = event.key;
    if (key === "a") {
      var approve = document.querySelector("[data-shortcut=approve]");
      if (approve && window.confirm("Approve this task?")) approve.click();
    } else if (key === "r") {
      var reason = document.querySelector("[data-shortcut=reject-reason]");
      if (reason) { event.preventDefault(); reason.focus(); }
    } else if (key === "j" || key === "k") {
      var rows = Array.prototype.slice.call(document.querySelectorAll("[data-queue-row]"));
      if (!rows.length) return;
      var current = rows.findIndex(function (row) { return row.classList.contains("selected"); });
      var next = key === "j" ? Math.min(rows.length - 1, current + 1) : Math.max(0, current - 1);
      rows.forEach(function (row) { row.classList.remove("selected"); });
      rows[next].classList.add("selected");
      rows[next].scrollIntoView({ block: "nearest" });
    } else if (key === "Enter") {
      var selected = document.querySelector("[data-queue-row].selected a");
      if (selected) selected.click();
    } else if (key === "/") {
      var search = document.querySelector("input[type=search]");
      if (search) { event.preventDefault(); search.focus(); }
    }
  });
})();

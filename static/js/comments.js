// Factory Memory: comment on diff lines in place, by mouse or keyboard. Without this file
// the comment form under the evidence does the same job.
(function () {
  "use strict";
  var anchor = null; // the row a selection started from
  var selected = [];

  function rowsOf(table) { return Array.prototype.slice.call(table.querySelectorAll("tr[data-line]")); }

  function select(from, to) {
    selected.forEach(function (row) { row.classList.remove("selected-line"); });
    var rows = rowsOf(from.closest("table"));
    var a = rows.indexOf(from), b = rows.indexOf(to);
    selected = rows.slice(Math.min(a, b), Math.max(a, b) + 1);
    selected.forEach(function (row) { row.classList.add("selected-line"); });
    rows.forEach(function (row) { row.tabIndex = -1; });
    to.tabIndex = 0;
    to.focus();
  }

  // The side whose numbers the selection uses: old when it starts on a removed line.
  function span() {
    var side = selected[0].classList.contains("del") ? "old" : "new";
    var numbers = selected
      .map(function (row) { return parseInt(row.dataset[side], 10); })
      .filter(function (n) { return !isNaN(n); });
    return { side: side, line: Math.min.apply(null, numbers), end: Math.max.apply(null, numbers) };
  }

  function closeForm() {
    var open = document.querySelector("tr.inline-form");
    if (open) open.remove();
  }

  function openForm() {
    var source = document.getElementById("comment-form");
    if (!source || !selected.length) return;
    closeForm();
    var where = span();
    var table = selected[0].closest("table");
    var form = source.cloneNode(true);
    form.removeAttribute("id");
    form.querySelector("[name=path]").value = table.dataset.path;
    form.querySelector("[name=line]").value = where.line;
    form.querySelector("[name=end_line]").value = where.end;
    form.querySelector("[name=side]").value = where.side;
    var body = form.querySelector("[name=body]");
    body.addEventListener("keydown", function (event) {
      if (event.key === "Escape") {
        var last = selected[selected.length - 1];
        closeForm();
        last.focus();
      } else if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        form.requestSubmit();
      }
    });
    var row = document.createElement("tr");
    row.className = "inline-form";
    var cell = document.createElement("td");
    cell.colSpan = 3;
    cell.appendChild(form);
    row.appendChild(cell);
    selected[selected.length - 1].after(row);
    body.focus();
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("table[data-commentable]").forEach(function (table) {
      var first = table.querySelector("tr[data-line]");
      if (first) first.tabIndex = 0;
    });
  });

  document.addEventListener("click", function (event) {
    // The line numbers are the handle, as in other code review tools; the code stays selectable.
    var row = event.target.closest("table[data-commentable] tr[data-line] td.ln") &&
      event.target.closest("tr[data-line]");
    if (!row) return;
    if (event.shiftKey && anchor && anchor.closest("table") === row.closest("table")) {
      select(anchor, row);
    } else {
      anchor = row;
      select(row, row);
    }
    openForm();
  });

  function typing(target) {
    var tag = (target.tagName || "").toLowerCase();
    return tag === "input" || tag === "textarea" || tag === "select" || target.isContentEditable;
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "d" && !typing(event.target)) {
      // d: into the diff, at its first line (or back to the line last selected).
      var start = selected[selected.length - 1] || document.querySelector("table[data-commentable] tr[data-line]");
      if (start) { event.preventDefault(); start.focus(); }
      return;
    }
    var row = event.target.closest && event.target.closest("table[data-commentable] tr[data-line]");
    if (!row) return;
    var rows = rowsOf(row.closest("table"));
    var here = rows.indexOf(row);
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      var next = rows[Math.max(0, Math.min(rows.length - 1, here + (event.key === "ArrowDown" ? 1 : -1)))];
      if (event.shiftKey && anchor) {
        select(anchor, next);
      } else {
        anchor = next;
        select(next, next);
      }
    } else if (event.key === "c" || event.key === "Enter") {
      event.preventDefault();
      if (!selected.length || selected.indexOf(row) < 0) { anchor = row; select(row, row); }
      openForm();
    } else if (event.key === "Escape") {
      closeForm();
    }
  });
})();

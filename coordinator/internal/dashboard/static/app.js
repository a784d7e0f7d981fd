// The dashboard's only script: it refreshes a page's #live part every
// data-refresh milliseconds (unless the operator is filling in a form in
// it), and
// streams a node's live log tail from its server-sent events.
(function () {
  "use strict";
  var body = document.body;
  var period = parseInt(body.getAttribute("data-refresh") || "0", 10);
  // busy: the operator is typing in the part, or has filled in a field of
  // it (a refresh would lose what they typed).
  function busy(live) {
    var a = document.activeElement;
    if (a && live.contains(a) && (a.tagName === "INPUT" || a.tagName === "TEXTAREA" || a.tagName === "SELECT")) return true;
    var fields = live.querySelectorAll("input, textarea");
    for (var i = 0; i < fields.length; i++) {
      if (fields[i].type !== "hidden" && fields[i].value !== fields[i].defaultValue) return true;
    }
    return false;
  }
  function refresh() {
    var live = document.getElementById("live");
    if (!live || document.hidden || busy(live)) return;
    fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html || busy(live)) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("live");
        if (fresh) live.innerHTML = fresh.innerHTML;
        var badge = doc.getElementById("inbox-count"), old = document.getElementById("inbox-count");
        if (old && !badge) old.remove();
        else if (old && badge) old.textContent = badge.textContent;
      })
      .catch(function () {});
  }
  if (period > 0) setInterval(refresh, period);

  var tail = document.getElementById("tail");
  if (tail && window.EventSource) {
    var state = document.getElementById("tail-state");
    var es = new EventSource(tail.getAttribute("data-src"));
    es.addEventListener("open", function () {
      state.textContent = "listening (lines appear while the agent runs)";
      tail.setAttribute("data-state", "open");
    });
    es.addEventListener("error", function () {
      state.textContent = "reconnecting…";
      tail.setAttribute("data-state", "closed");
    });
    es.addEventListener("log", function (ev) {
      var l = JSON.parse(ev.data);
      var line = document.createElement("span");
      line.className = "line";
      line.textContent = "[#" + l.attempt + " " + l.kind + "] " + l.text + "\n";
      tail.appendChild(line);
      while (tail.childNodes.length > 500) tail.removeChild(tail.firstChild);
      tail.scrollTop = tail.scrollHeight;
    });
  }
})();

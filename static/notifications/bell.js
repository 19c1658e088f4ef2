// The bell in the top bar: the unread count kept current (one small JSON count every 15 s while
// the tab is shown, through Trainyard.poll), and a popover with the latest 20, each a link that
// marks it read on the way, and "Mark all read". Escape or a click elsewhere closes it and the
// keyboard goes back to the bell. The notifications page's times are written in the viewer's zone.
(function () {
  "use strict";
  var API = "/api/v1/notifications/";
  var WHEN = { year: "numeric", month: "short", day: "numeric", hour: "numeric", minute: "2-digit", second: "2-digit",
               timeZoneName: "short" };
  var root = document.getElementById("bell");
  document.querySelectorAll(".notifications-page time[datetime]").forEach(function (t) {
    t.textContent = new Date(t.getAttribute("datetime")).toLocaleString([], WHEN);
  });
  if (!root) { return; }
  var button = document.getElementById("bell-button");
  var badge = document.getElementById("bell-badge");
  var panel = document.getElementById("bell-panel");
  var list = document.getElementById("bell-list");
  var readAll = document.getElementById("bell-read-all");
  var status = document.getElementById("bell-status");
  var unread = Number(badge.textContent.replace("+", "")) || 0;

  function csrf() {
    var m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }
  function post(url) {
    return fetch(url, { method: "POST", credentials: "same-origin", keepalive: true,
                        headers: { "X-CSRFToken": csrf(), "X-Requested-With": "fetch" } });
  }
  function showCount(count) {
    unread = count;
    badge.textContent = count > 99 ? "99+" : String(count);
    badge.hidden = count === 0;
    button.setAttribute("aria-label", count ? "Notifications, " + count + " unread" : "Notifications, none unread");
    readAll.disabled = count === 0;
  }
  function ago(date) {
    var s = Math.max(0, (Date.now() - date.getTime()) / 1000);
    if (s < 60) { return "just now"; }
    if (s < 3600) { return Math.floor(s / 60) + " min ago"; }
    if (s < 86400) { return Math.floor(s / 3600) + " h ago"; }
    return date.toLocaleString([], { month: "short", day: "numeric", hour: "numeric", minute: "2-digit" });
  }
  function span(cls, text) {
    var el = document.createElement("span");
    el.className = cls;
    el.textContent = text;
    return el;
  }
  function note(text) {
    var li = document.createElement("li");
    li.className = "bell-empty";
    li.textContent = text;
    return li;
  }
  function item(n) {
    var li = document.createElement("li");
    li.className = n.unread ? "unread" : "";
    li.dataset.notification = n.id;
    var link = document.createElement("a");
    link.href = n.url || "/notifications/";
    var title = span("bell-title", n.title);
    if (n.unread) { title.prepend(span("visually-hidden", "Unread: ")); }
    link.appendChild(title);
    if (n.body) { link.appendChild(span("bell-body", n.body)); }
    var at = new Date(n.created_at);
    var time = document.createElement("time");
    time.className = "bell-when";
    time.dateTime = n.created_at;
    time.title = at.toLocaleString([], WHEN);
    time.textContent = ago(at);
    link.appendChild(time);
    link.addEventListener("click", function (event) {
      if (!li.classList.contains("unread")) { return; }
      event.preventDefault();
      li.classList.remove("unread");
      showCount(Math.max(0, unread - 1));
      var go = function () { window.location.assign(link.href); };
      post(API + n.id + "/read/").then(go, go);
    });
    li.appendChild(link);
    return li;
  }
  function load() {
    return fetch(API + "?page_size=20", { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (resp) {
        if (!resp.ok || resp.redirected) { throw new Error(String(resp.status)); }
        return resp.json();
      })
      .then(function (data) {
        window.Trainyard.keepFocus(list, function () {
          list.replaceChildren();
          data.results.forEach(function (n) { list.appendChild(item(n)); });
          if (!data.results.length) { list.appendChild(note("No notifications yet.")); }
        });
      })
      .catch(function () {
        list.replaceChildren(note("Could not load notifications; try again in a moment."));
      });
  }
  function open() {
    panel.hidden = false;
    button.setAttribute("aria-expanded", "true");
    load();
  }
  function close(refocus) {
    if (panel.hidden) { return; }
    panel.hidden = true;
    button.setAttribute("aria-expanded", "false");
    if (refocus) { button.focus(); }
  }

  button.addEventListener("click", function () { if (panel.hidden) { open(); } else { close(false); } });
  root.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && !panel.hidden) { event.preventDefault(); close(true); }
  });
  document.addEventListener("click", function (event) { if (!root.contains(event.target)) { close(false); } });
  readAll.addEventListener("click", function () {
    post(API + "read-all/").then(function (resp) {
      if (!resp.ok) { throw new Error(String(resp.status)); }
      list.querySelectorAll("li.unread").forEach(function (li) {
        li.classList.remove("unread");
        var hint = li.querySelector(".visually-hidden");
        if (hint) { hint.remove(); }
      });
      showCount(0);
      status.textContent = "All notifications marked read.";
    }).catch(function () { status.textContent = "Could not mark them read; try again."; });
  });

  window.Trainyard.poll({
    url: function () { return API + "unread-count/"; },
    active: function () { return false; },
    idleMs: 15000,
    onText: function (text) {
      var count = JSON.parse(text).unread;
      if (count > unread) {  // said once, politely: the bell's own label says the total
        status.textContent = (count - unread) + (count - unread === 1 ? " new notification" : " new notifications");
      }
      if (count !== unread && !panel.hidden) { load(); }
      showCount(count);
    }
  });
  showCount(unread);
})();

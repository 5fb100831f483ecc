/* Tockwork dashboard: live regions and local times. Plain JavaScript, no build step.
 *
 * Live regions: every element with `data-live` (and an id) is refreshed in place every
 * `data-refresh` seconds of <body> (0: never). The page's own URL is fetched again and each
 * region is replaced by the region of the same id in the fresh page, so a refreshed region is
 * rendered by the same template as the first one. Nothing is fetched while the tab is hidden; a
 * region holding the keyboard focus is left alone; a failed refresh backs off (up to 8 times the
 * period) and says so in #live-status; a session that expired says "sign in again".
 *
 * Times: every <time datetime="..."> is shown in the zone of its closest `data-zone` ancestor
 * (a schedule's zone), else in the viewer's own zone; hovering shows the instant in UTC and how
 * far it is from now ("in 3 h", "5 min ago").
 */
(function () {
  "use strict";

  function pad(n) {
    return String(n).padStart(2, "0");
  }

  function utcText(d) {
    return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + " " +
      pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + ":" + pad(d.getUTCSeconds()) + " UTC";
  }

  function relative(d) {
    var s = (d.getTime() - Date.now()) / 1000;
    var a = Math.abs(s);
    var text = a < 90 ? Math.round(a) + " s" : a < 5400 ? Math.round(a / 60) + " min" :
      a < 172800 ? Math.round(a / 3600) + " h" : Math.round(a / 86400) + " days";
    return s >= 0 ? "in " + text : text + " ago";
  }

  function zonedText(d, zone) {
    var options = {
      year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
      second: "2-digit", hourCycle: "h23", timeZoneName: "short"
    };
    if (zone) {
      options.timeZone = zone;
    }
    var parts = {};
    try {
      new Intl.DateTimeFormat("en-US", options).formatToParts(d).forEach(function (p) {
        parts[p.type] = p.value;
      });
    } catch (e) {
      return null; // a zone this browser does not know: keep the server's UTC text
    }
    return parts.year + "-" + parts.month + "-" + parts.day + " " + parts.hour + ":" +
      parts.minute + ":" + parts.second + " " + parts.timeZoneName;
  }

  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      if (isNaN(d.getTime())) {
        return;
      }
      var holder = t.closest("[data-zone]");
      var zone = holder ? holder.getAttribute("data-zone") : undefined;
      var text = zonedText(d, zone);
      if (text) {
        t.textContent = text;
        t.title = utcText(d) + ", " + relative(d) +
          (zone ? " (shown in " + zone + ")" : " (shown in your zone)");
        t.classList.add("local");
      }
    });
  }

  var body = document.body;
  var every = Number(body.getAttribute("data-refresh") || 0);
  var status = document.getElementById("live-status");
  var regions = document.querySelectorAll("[data-live][id]");
  var failures = 0;
  var refreshes = 0;

  localTimes(document);
  window.tockworkLive = { refreshes: 0, failures: 0 };
  if (!(every > 0) || regions.length === 0) {
    if (status) {
      status.textContent = "";
    }
    return;
  }

  function say(text, bad) {
    if (status) {
      status.textContent = text;
      status.classList.toggle("warn", Boolean(bad));
    }
  }

  function swap(fresh) {
    document.querySelectorAll("[data-live][id]").forEach(function (region) {
      var next = fresh.getElementById(region.id);
      if (!next || region.contains(document.activeElement)) {
        return;
      }
      region.innerHTML = next.innerHTML;
      localTimes(region);
    });
  }

  function schedule() {
    window.setTimeout(tick, every * 1000 * Math.min(8, Math.pow(2, failures)));
  }

  function tick() {
    if (document.hidden) {
      schedule();
      return;
    }
    fetch(window.location.href, {
      headers: { "X-Tockwork-Live": "1" },
      credentials: "same-origin",
      cache: "no-store"
    }).then(function (response) {
      if (response.redirected || response.status === 401) {
        throw new Error("sign in again");
      }
      if (!response.ok) {
        throw new Error("HTTP " + response.status);
      }
      return response.text();
    }).then(function (html) {
      swap(new DOMParser().parseFromString(html, "text/html"));
      failures = 0;
      refreshes += 1;
      window.tockworkLive.refreshes = refreshes;
      var now = new Date();
      say("live: updated " + pad(now.getHours()) + ":" + pad(now.getMinutes()) + ":" +
        pad(now.getSeconds()), false);
    }).catch(function (error) {
      failures += 1;
      window.tockworkLive.failures = failures;
      say("live refresh failed (" + error.message + "); retrying", true);
    }).then(schedule);
  }

  say("live every " + every + " s", false);
  schedule();
}());

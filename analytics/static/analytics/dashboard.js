/* Cardloop feedback analytics dashboard.
 *
 * Every number comes from the JSON API (/api/v1/analytics/...) with the filters of the page's
 * URL, so a view is a bookmark and the page never computes a metric itself. The filter form is
 * a plain GET form: applying it reloads the page with the filters in the URL.
 * When everything is drawn, <body data-state="ready">; on an API error, data-state="error".
 */
(function () {
  "use strict";

  var config = JSON.parse(document.getElementById("dashboard-config").textContent);
  var T = config.strings;
  var numberFormat = new Intl.NumberFormat(config.language);
  var FILTERS = ["from", "to", "tz", "team", "bot", "chat", "topic", "model", "cli",
    "cli_version", "skill", "skill_version", "workflow", "task", "status", "channel", "semantic",
    "verdict", "reason"];
  var COLORS = { positive: "#2e9d5b", progress: "#d99a1c", negative: "#d64545", delivered: "#5470c6" };
  var charts = {};
  var nextCursor = null;

  function $(id) { return document.getElementById(id); }

  function fmt(template, values) {
    return template.replace(/%\((\w+)\)s/g, function (_m, key) { return values[key]; });
  }

  function num(n) { return numberFormat.format(n); }

  function pct(value) {
    return value === null || value === undefined ? "–" : (value * 100).toFixed(1) + "%";
  }

  /* Controls ← URL (or defaults). Without `tz` in the URL the page reports in the browser's
   * zone (falling back to CARDLOOP_REPORT_TZ), and the default range is the last 30 days of
   * that zone, today included. */
  var url = new URLSearchParams(window.location.search);
  var browserZone = "";
  try { browserZone = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (_e) { browserZone = ""; }
  function addDays(isoDate, days) {
    var d = new Date(isoDate + "T00:00:00Z");
    d.setUTCDate(d.getUTCDate() + days);
    return d.toISOString().slice(0, 10);
  }
  if (!url.get("tz") && browserZone) {
    config.defaults.tz = browserZone;
    try {
      var today = new Intl.DateTimeFormat("en-CA", { timeZone: browserZone, year: "numeric", month: "2-digit", day: "2-digit" }).format(new Date());
      config.defaults.from = addDays(today, -29);
      config.defaults.to = addDays(today, 1);
    } catch (_e) { /* keep the server's defaults */ }
  }
  document.body.dataset.tz = url.get("tz") || config.defaults.tz;
  function initialValue(name) {
    var v = url.get(name);
    if (v !== null && v !== "") { return v; }
    return config.defaults[name] || "";
  }
  FILTERS.concat(["granularity"]).forEach(function (name) {
    var el = $("f-" + name);
    if (el) { el.value = initialValue(name); }
  });
  $("rating-filter-note").hidden = !(["semantic", "verdict", "reason"].some(function (n) { return initialValue(n); }));

  function apiParams(extra) {
    var params = new URLSearchParams();
    FILTERS.forEach(function (name) {
      var v = initialValue(name);
      if (v) { params.set(name, v); }
    });
    Object.keys(extra || {}).forEach(function (k) { params.set(k, extra[k]); });
    return params;
  }

  function getJSON(path, extra) {
    return fetch(path + "?" + apiParams(extra).toString(), {
      credentials: "same-origin",
      headers: { Accept: "application/json" }
    }).then(function (response) {
      return response.json().then(function (body) {
        if (!response.ok) {
          var err = new Error(body.error || response.status);
          err.body = body;
          throw err;
        }
        return body;
      });
    });
  }

  /* An API error's detail as a person reads it: "from: message; to: message". */
  function describe(detail) {
    if (detail === null || detail === undefined) { return ""; }
    if (typeof detail === "string") { return detail; }
    if (Array.isArray(detail)) { return detail.map(describe).join(" "); }
    return Object.keys(detail).map(function (key) { return key + ": " + describe(detail[key]); }).join("; ");
  }

  function showError(err) {
    var box = $("error");
    var detail = err.body ? describe(err.body.detail) : String(err);
    box.textContent = T.error + " " + (err.body ? err.body.error + " — " : "") + detail;
    box.hidden = false;
    document.body.dataset.state = "error";
  }

  /* KPI cards */
  function deltaText(delta, isRate) {
    if (delta === null || delta === undefined) { return T.no_previous; }
    var sign = delta > 0 ? "+" : "";
    var text = isRate ? sign + (delta * 100).toFixed(1) + " pp" : sign + num(delta);
    return text + " " + T.vs_previous;
  }

  function setKpi(name, value, raw, parts, delta, isRate) {
    var card = $("kpi-" + name);
    card.querySelector(".value").textContent = value;
    card.dataset.value = raw === null ? "" : String(raw);
    card.querySelector(".parts").textContent = parts;
    var d = card.querySelector(".delta");
    d.textContent = deltaText(delta, isRate);
    d.className = "delta" + (delta > 0 ? " up" : delta < 0 ? " down" : "");
  }

  function renderSummary(s) {
    var c = s.current, d = s.delta;
    setKpi("delivered", num(c.delivered), c.delivered,
      fmt(T.feedback_shown, { n: num(c.feedback_shown) }), d.delivered, false);
    setKpi("coverage", pct(c.coverage.value), c.coverage.value,
      fmt(T.rated_of_delivered, { n: num(c.coverage.numerator), d: num(c.coverage.denominator) }),
      d.coverage, true);
    setKpi("positive_rate", pct(c.positive_rate.value), c.positive_rate.value,
      fmt(T.positive_of_ratings, { n: num(c.positive_rate.numerator), d: num(c.positive_rate.denominator) }),
      d.positive_rate, true);
    setKpi("ratings", num(c.ratings), c.ratings,
      fmt(T.ratings_on_deliveries, { n: num(c.rated_deliveries) }), d.ratings, false);
    setKpi("negative", num(c.negative), c.negative,
      fmt(T.negative_share, { n: num(c.negative), d: num(c.ratings) }), d.negative, false);
  }

  /* Charts */
  function drawChart(id, spec) {
    if (charts[id]) { charts[id].destroy(); }
    charts[id] = new window.Chart($(id), spec);
  }

  function renderTrend(t) {
    var labels = t.buckets.map(function (b) { return b.date; });
    var series = function (key) { return t.buckets.map(function (b) { return b[key]; }); };
    drawChart("trend-chart", {
      type: "bar",
      data: {
        labels: labels,
        datasets: [
          { type: "line", label: T.delivered, data: series("delivered"), borderColor: COLORS.delivered, backgroundColor: COLORS.delivered, yAxisID: "y", pointRadius: 0, tension: 0.2 },
          { label: T.positive, data: series("positive"), backgroundColor: COLORS.positive, stack: "r" },
          { label: T.progress, data: series("progress"), backgroundColor: COLORS.progress, stack: "r" },
          { label: T.negative, data: series("negative"), backgroundColor: COLORS.negative, stack: "r" }
        ]
      },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false,
        interaction: { mode: "index", intersect: false },
        scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true } }
      }
    });
    $("trend-chart").dataset.buckets = String(t.buckets.length);
  }

  function renderReasons(r) {
    var items = r.reasons;
    $("reasons-empty").hidden = r.negative_ratings > 0;
    var labels = items.map(function (i) { return i.label; });
    var data = items.map(function (i) { return i.count; });
    if (r.without_reason > 0) { labels.push(T.without_reason); data.push(r.without_reason); }
    drawChart("reasons-chart", {
      type: "bar",
      data: { labels: labels, datasets: [{ label: T.count, data: data, backgroundColor: COLORS.negative }] },
      options: {
        indexAxis: "y", animation: false, responsive: true, maintainAspectRatio: false,
        plugins: {
          legend: { display: false },
          tooltip: { callbacks: { afterLabel: function (ctx) {
            var item = items[ctx.dataIndex];
            return item ? item.key + " · " + pct(item.share.value) : "";
          } } }
        },
        scales: { x: { beginAtZero: true } }
      }
    });
    $("reasons-chart").dataset.keys = items.map(function (i) { return i.key; }).join(",");
  }

  function listItems(el, rows, text) {
    el.textContent = "";
    rows.forEach(function (row) {
      var li = document.createElement("li");
      li.textContent = text(row);
      el.appendChild(li);
    });
  }

  function renderFailures(f) {
    var d = f.deliveries, o = f.outbox;
    $("fail-deliveries").textContent = num(d.failed) + " (" + pct(d.rate.value) + ")";
    $("fail-deliveries").dataset.value = String(d.failed);
    $("fail-deliveries-parts").textContent =
      fmt(T.failed_of_delivered, { n: num(d.rate.numerator), d: num(d.rate.denominator) }) +
      " · " + T.send_failed + " " + num(d.by_status.send_failed) + " · " + T.failed + " " + num(d.by_status.failed);
    listItems($("fail-codes"), d.top_error_codes, function (r) { return (r.error_code || "—") + ": " + num(r.count); });
    $("fail-outbox").textContent = num(o.failed);
    $("fail-outbox").dataset.value = String(o.failed);
    $("fail-outbox-parts").textContent = fmt(T.outbox_parts, { f: num(o.by_status.failed), d: num(o.by_status.dead) });
    listItems($("fail-destinations"), o.by_destination, function (r) { return r.name + ": " + num(r.count); });
  }

  /* Drill-down */
  function cell(tr, text, className) {
    var td = document.createElement("td");
    td.textContent = text;
    if (className) { td.className = className; }
    tr.appendChild(td);
    return td;
  }

  function appendRows(page) {
    var body = document.querySelector("#deliveries tbody");
    page.results.forEach(function (row) {
      var tr = document.createElement("tr");
      tr.dataset.delivery = row.delivery_id;
      cell(tr, new Date(row.sent_at).toLocaleString(config.language, { timeZone: initialValue("tz") || undefined }));
      cell(tr, row.team ? row.team.name : "—");
      cell(tr, row.bot.name || row.bot.app_id);
      cell(tr, row.model || "—");
      cell(tr, row.skill_name ? row.skill_name + (row.skill_version ? " " + row.skill_version : "") : "—");
      cell(tr, (config.statuses || {})[row.status] || row.status);
      cell(tr, (config.channels || {})[row.channel] || row.channel);
      var ratings = cell(tr, "");
      if (!row.ratings.length) {
        ratings.textContent = T.unrated;
        ratings.className = "muted";
      }
      row.ratings.forEach(function (r) {
        var chip = document.createElement("span");
        chip.className = "chip " + r.semantic;
        chip.textContent = r.verdict_label + (r.reason_label ? " · " + r.reason_label : "") + (r.revision > 1 ? " (r" + r.revision + ")" : "");
        chip.title = r.verdict_key + (r.reason_key ? " / " + r.reason_key : "");
        ratings.appendChild(chip);
      });
      cell(tr, row.delivery_id, "mono");
      body.appendChild(tr);
    });
    nextCursor = page.next;
    $("load-more").hidden = !nextCursor;
    $("no-rows").hidden = document.querySelectorAll("#deliveries tbody tr").length > 0;
  }

  $("load-more").addEventListener("click", function () {
    $("load-more").disabled = true;
    getJSON(config.api.deliveries, { cursor: nextCursor }).then(function (page) {
      appendRows(page);
      $("load-more").disabled = false;
    }).catch(showError);
  });

  $("csv").href = config.api["deliveries-csv"] + "?" + apiParams().toString();

  /* Load everything */
  document.body.dataset.state = "loading";
  Promise.all([
    getJSON(config.api.summary).then(renderSummary),
    getJSON(config.api.trend, { granularity: initialValue("granularity") || "day" }).then(renderTrend),
    getJSON(config.api.reasons).then(renderReasons),
    getJSON(config.api.failures).then(renderFailures),
    getJSON(config.api.deliveries, { page_size: 25 }).then(appendRows)
  ]).then(function () {
    document.body.dataset.state = "ready";
  }).catch(showError);
})();

/* Cardloop review page: claim the next item, read it, record an outcome or skip, next.
 *
 * Everything goes through the review API (/api/v1/review/...): the page holds no state of its
 * own beyond the item on screen. Keyboard: 1–9 record that outcome, s skips, n claims the next
 * item; `?assigned=me` in the URL takes only items assigned to me. <body data-state> is "loading", "item" (an item is shown), "done" (its outcome was
 * recorded), "empty" (nothing left) or "error".
 */
(function () {
  "use strict";

  var config = JSON.parse(document.getElementById("review-config").textContent);
  var T = config.strings;
  var current = null;

  function $(id) { return document.getElementById(id); }
  function fmt(template, values) {
    return template.replace(/%\((\w+)\)s/g, function (_m, key) { return values[key]; });
  }
  function csrf() {
    var m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    if (m) { return decodeURIComponent(m[1]); }
    var field = document.querySelector("input[name=csrfmiddlewaretoken]");
    return field ? field.value : "";
  }
  function call(method, path, body) {
    return fetch(path, {
      method: method,
      credentials: "same-origin",
      headers: { Accept: "application/json", "Content-Type": "application/json", "X-CSRFToken": csrf() },
      body: body === undefined ? undefined : JSON.stringify(body)
    }).then(function (response) {
      return response.json().then(function (data) {
        if (!response.ok) { var err = new Error(data.error); err.body = data; throw err; }
        return data;
      });
    });
  }
  function describe(detail) {
    if (detail === null || detail === undefined) { return ""; }
    if (typeof detail === "string") { return detail; }
    if (Array.isArray(detail)) { return detail.map(describe).join(" "); }
    return Object.keys(detail).map(function (k) { return k + ": " + describe(detail[k]); }).join("; ");
  }
  function showError(err) {
    var box = $("error");
    box.textContent = T.error + " " + (err.body ? err.body.error + " — " + describe(err.body.detail) : String(err));
    box.hidden = false;
    document.body.dataset.state = "error";
  }
  function setText(id, text) { $(id).textContent = text || "—"; }
  function when(iso) { return iso ? new Date(iso).toLocaleString(config.language) : "—"; }

  function refreshProgress() {
    return call("GET", config.api.queue).then(function (q) {
      var p = q.progress;
      var el = $("progress");
      el.dataset.open = p.open; el.dataset.inReview = p.in_review; el.dataset.done = p.done;
      el.textContent = fmt(T.progress, { open: p.open, in_review: p.in_review, done: p.done });
    });
  }

  function render(item) {
    current = item;
    $("error").hidden = true;
    if (!item) {
      $("item").hidden = true;
      $("empty").textContent = T.empty;
      $("empty").hidden = false;
      document.body.dataset.state = "empty";
      return;
    }
    var d = item.delivery, r = item.rating;
    $("empty").hidden = true;
    $("item").hidden = false;
    $("item").dataset.item = item.id;
    setText("i-sent", when(d.sent_at));
    setText("i-team", d.team ? d.team.name : "");
    setText("i-bot", d.bot.name ? d.bot.name + " (" + d.bot.app_id + ")" : d.bot.app_id);
    setText("i-chat", d.chat_id);
    setText("i-model", d.model);
    setText("i-skill", d.skill_name ? d.skill_name + (d.skill_version ? " " + d.skill_version : "") : "");
    setText("i-workflow", d.workflow_id);
    setText("i-delivery", d.delivery_id);
    var content = $("i-content");
    content.textContent = "";
    if (d.content_ref) {
      var a = document.createElement("a");
      a.href = d.content_ref; a.textContent = d.content_ref; a.rel = "noopener noreferrer"; a.target = "_blank";
      content.appendChild(a);
    } else { content.textContent = "—"; }
    var chip = $("i-verdict");
    chip.className = "chip " + r.semantic;
    chip.textContent = r.verdict_label;
    $("i-reason").textContent = r.reason_label || T.no_reason;
    $("i-comment").textContent = r.comment || T.no_comment;
    $("i-claim").textContent = item.claim_expires_at ? fmt(T.claimed_until, { time: when(item.claim_expires_at) }) : "";
    var box = $("outcomes");
    box.textContent = "";
    item.queue.outcomes.forEach(function (o, i) {
      var b = document.createElement("button");
      b.type = "button";
      b.className = "outcome";
      b.dataset.outcome = o.key;
      b.textContent = o.label + " ";
      var k = document.createElement("kbd");
      k.textContent = String(i + 1);
      b.appendChild(k);
      b.addEventListener("click", function () { complete(o); });
      box.appendChild(b);
    });
    $("note").value = ""; $("link").value = "";
    $("skip").hidden = false; $("next").hidden = true;
    setButtons(false);
    document.body.dataset.state = "item";
  }

  function setButtons(disabled) {
    document.querySelectorAll("#outcome-form button").forEach(function (b) { b.disabled = disabled; });
  }

  /* Filters of the page's URL: `assigned=me` takes only items assigned to me. */
  var onlyMine = new URLSearchParams(window.location.search).get("assigned") === "me";
  var claimPath = config.api.claim + (onlyMine ? "?assigned=me" : "");

  function next() {
    document.body.dataset.state = "loading";
    return call("POST", claimPath).then(function (data) {
      return refreshProgress().then(function () { render(data.item); });
    }).catch(showError);
  }

  function complete(outcome) {
    if (!current || document.body.dataset.state !== "item") { return; }
    setButtons(true);
    document.body.dataset.state = "loading";
    call("POST", config.api.complete.replace("{id}", current.id), {
      outcome: outcome.key, note: $("note").value, external_link: $("link").value
    }).then(refreshProgress).then(function () {
      $("i-claim").textContent = fmt(T.done, { outcome: outcome.label });
      $("skip").hidden = true; $("next").hidden = false; $("next").disabled = false;
      document.body.dataset.state = "done";
    }).catch(function (err) { setButtons(false); showError(err); document.body.dataset.state = "item"; });
  }

  function skip() {
    if (!current || document.body.dataset.state !== "item") { return; }
    setButtons(true);
    document.body.dataset.state = "loading";
    call("POST", config.api.skip.replace("{id}", current.id)).then(next).catch(showError);
  }

  $("skip").addEventListener("click", skip);
  $("next").addEventListener("click", next);
  document.addEventListener("keydown", function (ev) {
    var tag = (ev.target && ev.target.tagName) || "";
    if (tag === "TEXTAREA" || tag === "INPUT" || tag === "SELECT" || ev.ctrlKey || ev.metaKey || ev.altKey) { return; }
    if (ev.key === "n") { if (document.body.dataset.state !== "loading") { next(); } return; }
    if (ev.key === "s") { skip(); return; }
    var n = parseInt(ev.key, 10);
    if (current && n >= 1 && n <= current.queue.outcomes.length) { complete(current.queue.outcomes[n - 1]); }
  });

  next();
})();

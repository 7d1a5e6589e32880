/* Cardloop question panel: shows the signed-in user's open ask_user_questions and answers them
 * over /ws/panel/ (protocol: interactions/panels/service.py). The server's snapshot on every (re)connect
 * is the truth; pushes only keep it current in between. No dependencies. */
(function () {
  "use strict";

  var T = JSON.parse(document.getElementById("panel-strings").textContent);
  var asksEl = document.getElementById("asks");
  var emptyEl = document.getElementById("empty");
  var statusEl = document.getElementById("status");
  var noticesEl = document.getElementById("notices");
  var socket = null;
  var retry = 0;
  var stopped = false;

  function fmt(text, values) {
    return text.replace(/%\((\w+)\)s/g, function (_m, key) { return values[key]; });
  }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) { node.setAttribute(key, attrs[key]); });
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function setState(state, text) {
    document.body.setAttribute("data-state", state);
    statusEl.textContent = text;
    statusEl.className = "status " + state;
  }

  function notice(text, kind) {
    var item = el("p", { "class": "notice " + (kind || "info") }, text);
    noticesEl.appendChild(item);
    setTimeout(function () { item.remove(); }, 8000);
  }

  function refreshEmpty() {
    emptyEl.hidden = asksEl.children.length > 0;
    document.body.setAttribute("data-asks", String(asksEl.children.length));
  }

  function findAsk(requestId) {
    var nodes = asksEl.querySelectorAll("section.ask");
    for (var i = 0; i < nodes.length; i++) {
      if (nodes[i].getAttribute("data-request-id") === requestId) return nodes[i];
    }
    return null;
  }

  function removeAsk(requestId, text) {
    var node = findAsk(requestId);
    if (node) {
      node.remove();
      if (text) notice(text, "info");
    }
    refreshEmpty();
  }

  function renderQuestion(q, qi, requestId) {
    var box = el("fieldset", { "class": "question", "data-index": String(qi) });
    var legend = el("legend");
    if (q.header) legend.appendChild(el("span", { "class": "chip" }, q.header));
    legend.appendChild(el("span", { "class": "text" }, q.question));
    box.appendChild(legend);
    box.appendChild(el("p", { "class": "hint" }, q.multiSelect ? T.multi : T.single));
    var name = requestId + "-q" + qi;
    (q.options || []).forEach(function (opt, oi) {
      var id = name + "-o" + oi;
      var row = el("label", { "class": "option", "for": id });
      var input = el("input", {
        type: q.multiSelect ? "checkbox" : "radio", name: name, id: id, value: opt.label
      });
      row.appendChild(input);
      var words = el("span", { "class": "words" });
      words.appendChild(el("span", { "class": "label" }, opt.label));
      if (opt.description) words.appendChild(el("span", { "class": "description" }, opt.description));
      row.appendChild(words);
      box.appendChild(row);
    });
    var other = el("label", { "class": "other" });
    other.appendChild(el("span", {}, T.other));
    other.appendChild(el("input", { type: "text", "class": "custom", name: name + "-other", maxlength: "500" }));
    box.appendChild(other);
    return box;
  }

  function renderAsk(message) {
    var existing = findAsk(message.requestId);
    if (existing) return; // already shown (a snapshot and a push may both carry it)
    var form = el("form", { "class": "ask-form", novalidate: "" });
    var section = el("section", { "class": "ask", "data-request-id": message.requestId });
    (message.questions || []).forEach(function (q, qi) {
      form.appendChild(renderQuestion(q, qi, message.requestId));
    });
    var footer = el("div", { "class": "actions" });
    if (message.expiresAt) {
      var when = new Date(message.expiresAt);
      footer.appendChild(el("span", { "class": "expires" }, fmt(T.expires, { time: when.toLocaleTimeString() })));
    }
    var error = el("span", { "class": "form-error", role: "alert" });
    footer.appendChild(error);
    var button = el("button", { type: "submit", "class": "submit" }, T.submit);
    footer.appendChild(button);
    form.appendChild(footer);
    form.addEventListener("input", function () { error.textContent = ""; });
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      submit(message, form, button, error);
    });
    section.appendChild(form);
    asksEl.appendChild(section);
    refreshEmpty();
  }

  function submit(message, form, button, error) {
    var answers = [];
    var missing = false;
    (message.questions || []).forEach(function (q, qi) {
      var box = form.querySelector('fieldset[data-index="' + qi + '"]');
      var labels = [];
      box.querySelectorAll("input[type=radio]:checked, input[type=checkbox]:checked").forEach(function (input) {
        labels.push(input.value);
      });
      var custom = box.querySelector("input.custom").value.trim();
      if (!labels.length && !custom) missing = true;
      answers.push({ question: q.question, selectedLabels: labels, customInput: custom });
    });
    if (missing) {
      error.textContent = T.rejected_empty_answer;
      return;
    }
    if (!socket || socket.readyState !== WebSocket.OPEN) {
      error.textContent = T.reconnecting;
      return;
    }
    error.textContent = "";
    button.disabled = true;
    button.textContent = T.submitting;
    socket.send(JSON.stringify({ type: "ask_user_questions_result", requestId: message.requestId, answers: answers }));
  }

  function rejected(message) {
    var text = T["rejected_" + message.code] || message.detail || message.code;
    if (message.code === "unknown" || message.code === "finished" || message.code === "not_sender") {
      removeAsk(message.requestId, text);
      return;
    }
    var node = findAsk(message.requestId);
    if (!node) return;
    node.querySelector(".form-error").textContent = text;
    var button = node.querySelector("button.submit");
    button.disabled = false;
    button.textContent = T.submit;
  }

  function snapshot(message) {
    var keep = {};
    (message.requestIds || []).forEach(function (id) { keep[id] = true; });
    Array.prototype.slice.call(asksEl.querySelectorAll("section.ask")).forEach(function (node) {
      if (!keep[node.getAttribute("data-request-id")]) node.remove();
    });
    refreshEmpty();
  }

  function handle(message) {
    switch (message.type) {
      case "snapshot": snapshot(message); break;
      case "ask_user_questions": renderAsk(message); break;
      case "ask_user_questions_cancelled":
        removeAsk(message.requestId, message.reason === "answered" ? T.answered_elsewhere : null);
        break;
      case "ask_user_questions_accepted": removeAsk(message.requestId, null); break;
      case "ask_user_questions_rejected": rejected(message); break;
      case "error":
        if (message.error === "invalid_token") {
          stopped = true;
          setState("signed-out", T.signed_out);
        } else {
          notice(T.error + " " + message.error, "error");
        }
        break;
      default: break;
    }
  }

  function connect() {
    if (stopped) return;
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    setState(retry ? "reconnecting" : "connecting", retry ? T.reconnecting : T.connecting);
    socket = new WebSocket(scheme + location.host + "/ws/panel/");
    socket.onopen = function () { retry = 0; };
    socket.onmessage = function (event) {
      var message;
      try { message = JSON.parse(event.data); } catch (e) { return; }
      if (message.type === "snapshot") setState("connected", T.connected);
      handle(message);
    };
    socket.onclose = function (event) {
      if (event.code === 4401) {
        stopped = true;
        setState("signed-out", T.signed_out);
        return;
      }
      if (stopped) return;
      retry += 1;
      setState("reconnecting", T.reconnecting);
      setTimeout(connect, Math.min(15000, 500 * Math.pow(2, Math.min(retry, 5))));
    };
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify({ type: "sync" }));
    }
  });
  refreshEmpty();
  connect();
})();

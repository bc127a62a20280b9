// worlds dashboard: keeps a page live and checks forms before they are sent.
// A page whose <main> has data-live listens to /live (Server-Sent Events) and, on a change,
// fetches itself again and swaps in the new <main>: no reload, the scroll position kept.
"use strict";

function watch() {
  const main = document.getElementById("main");
  const live = main && main.dataset.live;
  if (!live || !window.EventSource) return;
  const url = live.startsWith("run:") ? "/live?run=" + encodeURIComponent(live.slice(4)) : "/live";
  const source = new EventSource(url);
  let refreshing = false;
  async function refresh() {
    if (refreshing) return;
    refreshing = true;
    try {
      const response = await fetch(window.location.href, { credentials: "same-origin" });
      if (!response.ok) return;
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.getElementById("main");
      const open = new Set([...document.querySelectorAll("details[open]")].map((d) => d.parentElement && d.parentElement.id));
      if (fresh) {
        // Stream panels keep reading across the swap.
        const reading = document.getElementById("streams");
        main.innerHTML = fresh.innerHTML;
        const replaced = document.getElementById("streams");
        if (reading && replaced) replaced.replaceWith(reading);
        for (const id of open) {
          const details = id && document.querySelector("#" + CSS.escape(id) + " > details");
          if (details) details.open = true;
        }
        main.dataset.live = fresh.dataset.live || "";
        checkForms();
        streams();
      }
    } finally {
      refreshing = false;
    }
  }
  source.addEventListener("change", refresh);
  source.addEventListener("end", () => { source.close(); refresh(); });
  document.addEventListener("visibilitychange", () => {
    if (document.hidden) source.close();
    else if (source.readyState === EventSource.CLOSED) { watch(); refresh(); }
  }, { once: true });
}

// A hook's payload is checked before it is sent: JSON syntax here, then its type by the
// server (the check delivers nothing). The form is sent only once the server says yes.
function checkForms() {
  for (const form of document.querySelectorAll("form.resume")) {
    const area = form.querySelector("textarea");
    const note = form.querySelector(".check");
    if (!area || area.dataset.checked) continue;
    area.dataset.checked = "1";
    // The check below decides; the browser's own would block the submit event while an
    // earlier answer still stands.
    form.noValidate = true;
    let asked = 0;
    const say = (message) => {
      area.setCustomValidity(message);
      area.setAttribute("aria-invalid", message ? "true" : "false");
      if (note) note.textContent = message;
    };
    const check = async () => {
      const mine = ++asked;
      try { JSON.parse(area.value); }
      catch (e) { say("Not JSON: " + e.message); return false; }
      // The check's URL is the page's own (its ids percent-encoded by the server), never one
      // made from the form's action.
      const response = await fetch(form.dataset.check, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ payload: area.value }),
      });
      if (mine !== asked) return false;
      if (!response.ok) { say(""); return true; } // let the server's answer to the form say why
      const answer = await response.json();
      say(answer.ok ? "" : answer.error);
      return answer.ok;
    };
    let pause = null;
    area.addEventListener("input", () => { clearTimeout(pause); pause = setTimeout(check, 250); });
    form.addEventListener("submit", async (event) => {
      event.preventDefault(); // form.submit() below does not come back here
      clearTimeout(pause);
      if (await check()) form.submit();
      else area.focus(); // the message is shown under the field and announced
    });
  }
}

// A run's stream, read live while its panel is open: every chunk as it is written.
function streams() {
  for (const view of document.querySelectorAll("details.stream-view")) {
    if (view.dataset.wired) continue;
    view.dataset.wired = "1";
    let source = null;
    view.addEventListener("toggle", () => {
      if (!view.open) { if (source) source.close(); source = null; return; }
      if (source) return;
      const out = view.querySelector(".stream-text");
      out.textContent = "";
      const url = "/live/stream?run=" + encodeURIComponent(view.dataset.run) +
        "&name=" + encodeURIComponent(view.dataset.stream);
      source = new EventSource(url);
      source.addEventListener("chunk", (event) => {
        const chunk = JSON.parse(event.data);
        out.textContent += (chunk.text !== undefined ? chunk.text : "[" + chunk.base64 + "]") + "\n";
      });
      source.addEventListener("end", () => { source.close(); out.textContent += "— end of stream —\n"; });
    });
  }
}

document.addEventListener("DOMContentLoaded", () => { checkForms(); streams(); watch(); });

// outbox-relay UI: progressive enhancement only. Every page works without this script;
// it refreshes the lanes table in place and adds "select all" to the dead letters.
"use strict";

// A section with data-refresh="N" is fetched again every N seconds and swapped in,
// unless the operator is typing in one of its forms (a pause reason would be lost).
function refreshLoop(section) {
  const seconds = Number(section.dataset.refresh) || 5;
  const busy = () =>
    section.contains(document.activeElement) &&
    document.activeElement.matches("input, select, textarea, button") ||
    Array.from(section.querySelectorAll("input[type=text]")).some((input) => input.value !== "");
  setInterval(async () => {
    if (document.hidden || busy()) return;
    try {
      const answer = await fetch(location.href, { credentials: "same-origin", headers: { "X-Refresh": "1" } });
      if (!answer.ok) return;
      const page = new DOMParser().parseFromString(await answer.text(), "text/html");
      const fresh = page.getElementById(section.id);
      if (fresh && !busy()) section.replaceChildren(...fresh.childNodes);
    } catch (_) {
      // The relay is restarting or the network is down: try again next time.
    }
  }, seconds * 1000);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-refresh][id]").forEach(refreshLoop);
  document.querySelectorAll("input[data-select-all]").forEach((all) => {
    all.hidden = false;
    all.addEventListener("change", () => {
      all.form.querySelectorAll("input[name=id]").forEach((box) => { box.checked = all.checked; });
    });
  });
});

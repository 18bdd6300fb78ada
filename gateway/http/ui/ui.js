// Shunter status page: re-render the live panel from the server every few seconds.
(() => {
  "use strict";
  const panel = document.getElementById("panel");
  const state = document.getElementById("refresh-state");
  const every = Number(document.body.dataset.refreshMs) || 2000;
  let busy = false;

  async function refresh() {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const answer = await fetch("/ui/panel", { credentials: "same-origin", cache: "no-store" });
      if (answer.status === 401) {
        window.location.reload(); // the session ended: show the sign-in form
        return;
      }
      if (!answer.ok) throw new Error(`HTTP ${answer.status}`);
      // the panel is the gateway's own server-rendered, escaped markup
      panel.innerHTML = await answer.text();
      state.textContent = "live";
      state.className = "";
    } catch (error) {
      state.textContent = `offline (${error.message}); retrying`;
      state.className = "stale";
    } finally {
      busy = false;
    }
  }

  setInterval(refresh, every);
  document.addEventListener("visibilitychange", refresh);
})();

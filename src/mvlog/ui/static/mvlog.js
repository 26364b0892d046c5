// mvlog ui: reload the page's content every few seconds, in place (no script from elsewhere).
(function () {
  "use strict";
  const seconds = Number(document.body.dataset.reload || 0);
  if (!seconds) { return; }
  async function reload() {
    try {
      const response = await fetch(window.location.href, { cache: "no-store" });
      if (!response.ok) { return; }
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.querySelector("main");
      const scroll = document.querySelector(".graph");
      const left = scroll ? scroll.scrollLeft : 0, top = scroll ? scroll.scrollTop : 0;
      if (fresh) { document.querySelector("main").replaceWith(fresh); }
      const again = document.querySelector(".graph");
      if (again) { again.scrollLeft = left; again.scrollTop = top; }
      document.title = page.title;
    } catch (err) {
      // the server is restarting or gone: keep the last page and try again later
    }
  }
  window.setInterval(reload, seconds * 1000);
}());

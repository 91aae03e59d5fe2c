// The dashboard's router: one view per location hash (#/topics, #/messages?topic=...), each
// rendered from the HTTP front's JSON routes; views that show live numbers refresh on a timer
// that stops when the view changes.

import { ApiError, api, setCredentials } from "./api.js";
import { h, iso } from "./dom.js";
import { views } from "./views.js";

const main = document.getElementById("view");
const errorBox = document.getElementById("error");
let timers = [];
let generation = 0;

function parseHash() {
  const [path, search] = location.hash.replace(/^#\/?/, "").split("?");
  const name = views[path] ? path : "overview";
  return { name, params: Object.fromEntries(new URLSearchParams(search || "")) };
}

export function showError(err) {
  errorBox.hidden = false;
  errorBox.replaceChildren(
    h("strong", {}, err instanceof ApiError && err.status ? `${err.status} ${err.code}: ` : ""),
    err.message,
  );
  if (err instanceof ApiError && err.status === 401) errorBox.append(loginForm());
}

function clearError() {
  errorBox.hidden = true;
  errorBox.replaceChildren();
}

function loginForm() {
  const key = h("input", { name: "accessKey", placeholder: "access key", autocomplete: "username" });
  const secret = h("input", { name: "secretKey", type: "password", placeholder: "secret key", autocomplete: "current-password" });
  return h(
    "form",
    {
      class: "inline",
      onsubmit: (event) => {
        event.preventDefault();
        setCredentials(key.value, secret.value);
        route();
      },
    },
    " An admin account of the broker's ACL: ",
    key,
    secret,
    h("button", { type: "submit" }, "Sign in"),
  );
}

async function updateChrome() {
  try {
    const clock = await api.clock();
    const chip = document.getElementById("clock-chip");
    chip.textContent = `${clock.manual ? "manual clock" : "clock"} ${iso(clock.now_ms)}`;
    chip.classList.toggle("manual", Boolean(clock.manual));
  } catch {
    // the view itself reports errors; the chip just keeps its last value
  }
}

async function route() {
  const mine = ++generation;
  for (const timer of timers) clearInterval(timer);
  timers = [];
  const { name, params } = parseHash();
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.view === name);
  const ctx = {
    params,
    current: () => mine === generation,
    every(ms, fn) {
      timers.push(setInterval(() => mine === generation && run(fn), ms));
    },
    rerender: () => route(),
    error: showError,
  };
  async function run(fn) {
    try {
      await fn();
      if (mine === generation) clearError();
    } catch (err) {
      if (mine === generation) showError(err);
    }
  }
  await run(async () => {
    const node = await views[name](ctx);
    if (mine === generation) main.replaceChildren(node);
  });
  document.body.dataset.view = name;
  document.body.dataset.rendered = String(mine);
  updateChrome();
}

window.addEventListener("hashchange", route);
api
  .broker()
  .then((broker) => {
    document.getElementById("broker-name").textContent = `${broker.cluster_name} / ${broker.broker_name}`;
    document.title = `pocketmq · ${broker.broker_name}`;
  })
  .catch(() => {});
route();

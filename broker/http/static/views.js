// The dashboard's views. Each takes the router's context and returns the view's element;
// a view that shows live numbers re-renders its own parts on ctx.every().

import { api } from "./api.js";
import { barChart, lineChart } from "./chart.js";
import { base64Bytes, crc32, hex, utf8OrNull } from "./crc32.js";
import { badge, h, hashFor, iso, link, num, table } from "./dom.js";

const STATES = ["available", "unavailable", "poisoned", "marked_for_deletion"];
const LAG_HISTORY_MAX = 120; // samples kept per group and topic (four minutes at one per 2 s)
const lagHistory = new Map();
const GROUP_LAG_MAX = 50; // groups whose total lag the group list asks for

function section(title, ...children) {
  return h("section", {}, h("h2", {}, title), ...children);
}

function keyValues(pairs) {
  return h("dl", { class: "kv" }, pairs.flatMap(([key, value]) => [h("dt", {}, key), h("dd", {}, value ?? "—")]));
}

function refreshing(ctx, ms, build) {
  // A holder whose content build() replaces on every tick.
  const holder = h("div");
  const fill = async () => {
    const node = await build();
    if (ctx.current()) holder.replaceChildren(node);
  };
  ctx.every(ms, fill);
  return fill().then(() => holder);
}

// -- overview -------------------------------------------------------------------------------

async function overview(ctx) {
  return refreshing(ctx, 3000, async () => {
    const [health, ready, broker] = await Promise.all([api.health(), api.ready(), api.broker()]);
    const checks = Object.entries(health.checks || {});
    const addresses = [
      ["remoting", broker.address],
      ["VIP channel", broker.vip_address],
      ["gRPC", broker.grpc_address],
      ["HTTP", broker.http_address],
      ["name servers", (broker.namesrv_addrs || []).join(", ") || "—"],
    ].map(([k, v]) => [k, v ?? "off"]);
    return h(
      "div",
      { class: "grid2" },
      section(
        "Health",
        h("p", { class: "big" }, badge(health.status, health.status), " ", badge(ready.status, ready.status)),
        table(
          [
            ["check", ([name]) => name],
            ["result", ([, result]) => badge(result, result === "ok" ? "ok" : result === "off" ? "off" : "bad")],
          ],
          checks,
        ),
        (health.reasons || []).length ? h("ul", { class: "reasons" }, health.reasons.map((r) => h("li", {}, r))) : null,
      ),
      section(
        "Broker",
        keyValues([
          ["name", `${broker.broker_name} (id ${broker.broker_id})`],
          ["cluster", broker.cluster_name],
          ["flush", broker.flush],
          ["data", broker.data_dir ?? "in memory"],
          ["clock", `${iso(broker.clock?.now_ms)}${broker.clock?.manual ? " (manual)" : ""}`],
          ["topics", num(broker.topic_number)],
          ["consumer groups", num(broker.consumer_group_number)],
          ["commit log", broker.store ? `${num(broker.store.min_commitlog_offset)} … ${num(broker.store.max_commitlog_offset)} bytes${broker.store.in_memory ? " (in memory)" : ""}` : "—"],
        ]),
        h("h3", {}, "Addresses"),
        keyValues(addresses),
      ),
    );
  });
}

// -- topics ---------------------------------------------------------------------------------

function stored(topic) {
  return (topic.queues || []).reduce((sum, q) => sum + (q.max_offset - q.min_offset), 0);
}

function rate(value) {
  return value === undefined || value === null ? "—" : Number(value).toFixed(2);
}

async function topics(ctx) {
  const system = ctx.params.system === "true";
  const toggle = h("label", { class: "toggle" },
    h("input", {
      type: "checkbox",
      checked: system,
      onchange: (e) => (location.hash = hashFor("topics", { system: e.target.checked ? "true" : "" })),
    }),
    " system, retry and DLQ topics");
  const body = await refreshing(ctx, 3000, async () => {
    const [all, stats] = await Promise.all([api.topics(system), api.topicRates()]);
    const list = system ? all : all.filter((t) => !t.system);
    const rates = new Map(stats.topics.map((r) => [r.topic, r]));
    list.sort((a, b) => a.topic.localeCompare(b.topic));
    return table(
      [
        ["topic", (t) => link(t.topic, hashFor("messages", { topic: t.topic, queue: 0 }))],
        ["type", (t) => t.message_type || "NORMAL"],
        ["queues r/w", (t) => `${t.read_queue_nums}/${t.write_queue_nums}`, "num"],
        ["perm", (t) => t.perm, "num"],
        ["messages", (t) => num(stored(t)), "num"],
        ["in msg/s", (t) => rate(rates.get(t.topic)?.in.tps), "num"],
        ["out msg/s", (t) => rate(rates.get(t.topic)?.out.tps), "num"],
        ["in since start", (t) => num(rates.get(t.topic)?.in.messages ?? 0), "num"],
        ["out since start", (t) => num(rates.get(t.topic)?.out.messages ?? 0), "num"],
      ],
      list,
      { empty: "no topics yet", rowAttrs: (t) => ({ dataset: { topic: t.topic } }) },
    );
  });
  return section("Topics", toggle, body, h("p", { class: "note" }, "Rates: the last minute's messages per second, as RocketMQ's stats. Click a topic to browse its messages."));
}

// -- groups and lag -------------------------------------------------------------------------

function lagRows(data) {
  const rows = Array.isArray(data) ? data : data.queues || [];
  return rows.map((r) => ({
    ...r,
    lag: r.lag ?? r.diff ?? Math.max(0, (r.broker_offset ?? 0) - (r.consumer_offset ?? 0)),
  }));
}

async function groups(ctx) {
  const chosen = ctx.params.group;
  const picker = await refreshing(ctx, 2000, async () => {
    const list = await api.groups();
    list.sort((a, b) => a.group.localeCompare(b.group));
    // Each group's total lag, for the first GROUP_LAG_MAX groups (one request each).
    const lags = new Map(
      await Promise.all(
        list.slice(0, GROUP_LAG_MAX).map(async (g) => [g.group, (await api.lag(g.group).catch(() => ({ lag: null }))).lag]),
      ),
    );
    return table(
      [
        ["group", (g) => link(g.group, hashFor("groups", { group: g.group }))],
        ["online clients", (g) => num(Array.isArray(g.online_clients) ? g.online_clients.length : g.online_clients), "num"],
        ["topics", (g) => (g.topics || []).join(", ")],
        ["lag", (g) => num(lags.get(g.group)), "num"],
        ["retries", (g) => g.retry_max_times, "num"],
        ["orderly", (g) => (g.consume_message_orderly ? "yes" : "no")],
        ["dead letters", (g) => link("DLQ", hashFor("dlq", { group: g.group }))],
      ],
      list,
      { empty: "no consumer groups yet", rowAttrs: (g) => ({ class: g.group === chosen ? "selected" : "" }) },
    );
  });
  const parts = [section("Consumer groups", picker)];
  if (chosen) parts.push(await groupLag(ctx, chosen, ctx.params.topic));
  return h("div", {}, parts);
}

async function groupLag(ctx, group, topic) {
  const key = `${group}|${topic || ""}`;
  const body = await refreshing(ctx, 2000, async () => {
    const data = await api.lag(group, topic);
    const rows = lagRows(data);
    const total = rows.reduce((sum, r) => sum + r.lag, 0);
    const inflight = rows.reduce((sum, r) => sum + (r.inflight ?? 0), 0);
    const history = lagHistory.get(key) || [];
    history.push({ t: Date.now(), value: total });
    if (history.length > LAG_HISTORY_MAX) history.shift();
    lagHistory.set(key, history);
    return h(
      "div",
      {},
      h("p", { class: "big" }, "total lag ", h("strong", { id: "lag-total", dataset: { lag: total } }, num(total)), "   inflight ", h("strong", { id: "inflight-total" }, num(inflight))),
      h(
        "div",
        { class: "charts" },
        barChart(rows.map((r) => ({ label: `${rows.some((x) => x.topic !== rows[0].topic) ? `${r.topic}:` : "q"}${r.queue_id}`, value: r.lag })), { title: "lag per queue (messages)" }),
        lineChart(history, { title: "total lag, while this page watches" }),
      ),
      table(
        [
          ["topic", (r) => r.topic],
          ["queue", (r) => r.queue_id, "num"],
          ["broker offset", (r) => num(r.broker_offset), "num"],
          ["consumer offset", (r) => num(r.consumer_offset), "num"],
          ["lag", (r) => num(r.lag), "num"],
          ["inflight", (r) => num(r.inflight), "num"],
          ["last consumed", (r) => iso(r.last_timestamp ?? r.last_consumed_ms)],
        ],
        rows,
        { empty: "the group consumes no queue", rowAttrs: (r) => ({ class: "lag-row", dataset: { topic: r.topic, queue: r.queue_id, lag: r.lag } }) },
      ),
    );
  });
  return section(`Lag of ${group}${topic ? ` on ${topic}` : ""}`, body);
}

// -- message browser ------------------------------------------------------------------------

function headerText(headers, name) {
  const header = headers && headers[name];
  return header ? new TextDecoder().decode(base64Bytes(header.value)) : "";
}

function idHex(id) {
  try {
    return BigInt(id).toString(16).toUpperCase().padStart(32, "0");
  } catch {
    return String(id);
  }
}

export function verify(message) {
  const bytes = base64Bytes(message.payload);
  const computed = crc32(bytes);
  return { bytes, computed, ok: computed === Number(message.checksum) >>> 0 };
}

function payloadCell(bytes) {
  const text = utf8OrNull(bytes);
  const shown = text === null ? hex(bytes, 24) : text.length > 80 ? `${text.slice(0, 80)}…` : text;
  return h("span", { class: text === null ? "mono dim" : "payload", title: text ?? "" }, shown);
}

async function messages(ctx) {
  const p = ctx.params;
  const topicList = await api.topics(true);
  const names = topicList.map((t) => t.topic).sort();
  const form = h(
    "form",
    {
      class: "inline",
      id: "browse",
      onsubmit: (event) => {
        event.preventDefault();
        const f = new FormData(event.target);
        location.hash = hashFor("messages", {
          topic: f.get("topic"),
          queue: f.get("queue"),
          offset: f.get("offset"),
          count: f.get("count"),
          state: f.get("state"),
        });
      },
    },
    h("label", {}, "topic ", h("input", { name: "topic", list: "topic-names", value: p.topic || "", required: true })),
    h("datalist", { id: "topic-names" }, names.map((n) => h("option", { value: n }))),
    h("label", {}, "queue ", h("input", { name: "queue", type: "number", min: 0, value: p.queue || 0, class: "short" })),
    h("label", {}, "from offset ", h("input", { name: "offset", type: "number", min: 0, value: p.offset ?? "", placeholder: "min", class: "short" })),
    h("label", {}, "count ", h("input", { name: "count", type: "number", min: 1, max: 1000, value: p.count || 20, class: "short" })),
    h("label", {}, "state ", h("select", { name: "state" }, h("option", { value: "" }, "any"), STATES.map((s) => h("option", { value: s, selected: p.state === s }, s)))),
    h("button", { type: "submit" }, "Show"),
  );
  const parts = [form];
  if (p.topic) {
    const poll = await api.messages(p.topic, Number(p.queue || 0), { offset: p.offset, count: p.count || 20, state: p.state });
    const rows = poll.messages.map((m) => ({ ...m, check: verify(m) }));
    const bad = rows.filter((r) => !r.check.ok).length;
    parts.push(
      h("p", { class: "note" },
        `queue ${poll.queue_id}: offsets ${num(poll.min_offset)} … ${num(poll.max_offset)}; ${rows.length} shown; `,
        bad ? badge(`${bad} checksum mismatch`, "bad") : badge("all checksums verified in the page", "ok")),
      table(
        [
          ["offset", (m) => m.offset, "num"],
          ["state", (m) => badge(m.state.replaceAll("_", " "), m.state)],
          ["stored", (m) => iso(Math.floor(m.timestamp / 1000))],
          // The lifecycle is asked by the unique key as sent (a 5.x ID keeps its version byte,
          // which the transport's 128-bit id drops), else by the id.
          ["id", (m) => link(idHex(m.id), hashFor("lifecycle", { id: headerText(m.headers, "UNIQ_KEY") || idHex(m.id), topic: p.topic })), "mono"],
          ["tags", (m) => headerText(m.headers, "TAGS")],
          ["keys", (m) => headerText(m.headers, "KEYS")],
          ["bytes", (m) => num(m.check.bytes.length), "num"],
          ["CRC-32", (m) => h("span", { class: "mono" }, (Number(m.checksum) >>> 0).toString(16).padStart(8, "0")), "num"],
          ["check", (m) => h("span", { class: `checksum ${m.check.ok ? "checksum-ok" : "checksum-bad"}`, title: `computed ${m.check.computed.toString(16).padStart(8, "0")}` }, m.check.ok ? "ok" : "mismatch")],
          ["payload", (m) => payloadCell(m.check.bytes)],
        ],
        rows,
        { empty: "no messages at these offsets", rowAttrs: (m) => ({ class: "message-row", dataset: { offset: m.offset, state: m.state } }) },
      ),
      poll.next_offset < poll.max_offset
        ? h("p", {}, link("next page →", hashFor("messages", { ...p, offset: poll.next_offset })))
        : null,
    );
  }
  return section("Message browser", ...parts);
}

// -- lifecycle ------------------------------------------------------------------------------

const EVENT_KIND = {
  sent: "ok", delivered: "ok", consumed: "ok", committed: "ok", resent: "ok",
  dead_lettered: "bad", poisoned: "bad", rolled_back: "bad", discarded: "bad", marked_for_deletion: "bad",
};

async function lifecycle(ctx) {
  const p = ctx.params;
  const form = h(
    "form",
    {
      class: "inline",
      onsubmit: (event) => {
        event.preventDefault();
        const f = new FormData(event.target);
        location.hash = hashFor("lifecycle", { id: f.get("id").trim(), topic: f.get("topic").trim() });
      },
    },
    h("label", {}, "message ID ", h("input", { name: "id", value: p.id || "", required: true, class: "wide", placeholder: "unique key or offset message ID" })),
    h("label", {}, "topic ", h("input", { name: "topic", value: p.topic || "", placeholder: "any user topic" })),
    h("button", { type: "submit" }, "Trace"),
  );
  const parts = [form];
  if (p.id) {
    const life = await api.lifecycle(p.id, p.topic);
    parts.push(
      h("p", { class: "note" }, `${life.msg_id} in ${life.topic}: ${life.events.length} events`),
      h(
        "ol",
        { class: "timeline" },
        life.events.map((e) =>
          h(
            "li",
            { class: `event ${EVENT_KIND[e.event] || ""}`, dataset: { event: e.event } },
            h("div", { class: "when" }, e.at_ms === null ? "(no time)" : iso(e.at_ms)),
            h("div", { class: "what" }, badge(e.event.replaceAll("_", " "), EVENT_KIND[e.event] || "info"), " ", e.detail || ""),
            h("div", { class: "where" }, e.topic ? `${e.topic} · queue ${e.queue_id ?? "—"} · offset ${e.queue_offset ?? "—"}` : "", e.offset_msg_id ? ` · ${e.offset_msg_id}` : ""),
          ),
        ),
      ),
    );
  }
  return section("Message lifecycle", ...parts);
}

// -- dead letters ---------------------------------------------------------------------------

async function dlq(ctx) {
  const group = ctx.params.group;
  const groupList = await api.groups();
  const picker = h(
    "form",
    { class: "inline" },
    h("label", {}, "group ",
      h("select", { name: "group", id: "dlq-group", onchange: (e) => (location.hash = hashFor("dlq", { group: e.target.value })) },
        h("option", { value: "" }, "choose a group"),
        groupList.map((g) => g.group).sort().map((g) => h("option", { value: g, selected: g === group }, g)))),
  );
  if (!group) return section("Dead letters", picker);
  const outcome = h("div", { id: "resend-outcome" });
  const listHolder = h("div");
  const checks = new Map();
  let count = 0;
  async function showList() {
    const letters = await api.dlq(group);
    count = letters.length;
    checks.clear();
    listHolder.replaceChildren(
      table(
        [
          ["", (m) => {
            const box = h("input", { type: "checkbox", class: "pick", dataset: { id: m.msg_id } });
            checks.set(m.msg_id, box);
            return box;
          }],
          ["message", (m) => link(m.msg_id, hashFor("lifecycle", { id: m.msg_id })), "mono"],
          ["from topic", (m) => m.properties?.RETRY_TOPIC ?? "—"],
          ["dead-lettered", (m) => iso(m.store_timestamp)],
          ["state", (m) => badge(m.state.replaceAll("_", " "), m.state)],
          ["retries", (m) => m.reconsume_times, "num"],
          ["reason", (m) => m.dead_letter_reason || m.state_reason || "—"],
          ["body", (m) => h("span", { class: "payload" }, (m.body || "").slice(0, 60))],
        ],
        letters,
        { empty: `no dead letters for ${group}`, rowAttrs: (m) => ({ class: "dlq-row", dataset: { id: m.msg_id, state: m.state } }) },
      ),
      letters.length
        ? h("p", { class: "buttons" },
            h("button", { id: "resend-selected", onclick: () => resend([...checks].filter(([, b]) => b.checked).map(([id]) => id)) }, "Resend selected"),
            h("button", { id: "resend-all", onclick: () => resend([]) }, `Resend all ${count}`))
        : "",
    );
  }
  async function resend(ids) {
    try {
      const results = await api.resend(group, ids);
      outcome.replaceChildren(
        h("h3", {}, "Resent"),
        table(
          [
            ["message", (r) => r.msg_id, "mono"],
            ["outcome", (r) => badge(r.outcome, r.outcome === "resent" ? "ok" : "bad")],
            ["to topic", (r) => r.topic ?? "—"],
            ["new copy", (r) => r.offset_msg_id ?? "—", "mono"],
          ],
          results,
          { empty: "nothing to resend", rowAttrs: (r) => ({ class: "resend-row", dataset: { outcome: r.outcome } }) },
        ),
      );
      await showList(); // the dead letters' states after the resend
    } catch (err) {
      ctx.error(err);
    }
  }
  await showList();
  return section(`Dead letters of ${group}`, picker, listHolder, outcome,
    h("p", { class: "note" }, "A resend writes each message back to the topic it came from and marks its dead letter for deletion; resending it again answers \"already resent\"."));
}

// -- transactions ---------------------------------------------------------------------------

async function transactions(ctx) {
  const body = await refreshing(ctx, 3000, async () =>
    table(
      [
        ["transaction", (t) => t.transaction_id, "mono"],
        ["producer group", (t) => t.producer_group],
        ["topic", (t) => t.topic],
        ["born", (t) => iso(t.born_timestamp)],
        ["checks so far", (t) => t.check_times, "num"],
        ["next check", (t) => iso(t.next_check_ms)],
        ["half message", (t) => link(t.offset_msg_id, hashFor("lifecycle", { id: t.offset_msg_id })), "mono"],
      ],
      await api.transactions(),
      { empty: "no pending transactions", rowAttrs: (t) => ({ class: "tx-row" }) },
    ),
  );
  return section("Pending transactions", body);
}

// -- clock ----------------------------------------------------------------------------------

async function clock(ctx) {
  const state = h("div");
  const fired = h("div", { id: "advance-outcome" });
  async function show() {
    const c = await api.clock();
    state.replaceChildren(
      keyValues([
        ["now", h("span", { id: "clock-now", dataset: { ms: c.now_ms } }, iso(c.now_ms))],
        ["kind", c.manual ? "manual: time moves only when advanced" : "system clock"],
        ["due later", `${num(c.pending)} scheduled (delays, timers, retries, checks)`],
      ]),
    );
    return c;
  }
  const c = await show();
  ctx.every(3000, show);
  async function advance(duration) {
    try {
      const result = await api.advance(duration);
      fired.replaceChildren(h("p", { class: "note" }, `advanced ${duration}: now ${iso(result.now_ms)}; ${num(result.fired)} fired, ${num(result.pending)} still pending`));
      await show();
    } catch (err) {
      ctx.error(err);
    }
  }
  const input = h("input", { name: "duration", id: "advance-by", value: "1m", class: "short", pattern: "[0-9hms ]+" });
  const controls = c.manual
    ? h(
        "form",
        { class: "inline", onsubmit: (e) => { e.preventDefault(); advance(input.value.trim()); } },
        "advance by ", input, h("button", { type: "submit", id: "advance" }, "Advance"),
        ["10s", "1m", "10m", "1h", "2h"].map((d) => h("button", { type: "button", class: "preset", onclick: () => advance(d) }, `+${d}`)),
      )
    : h("p", { class: "note" }, "The broker runs on the system clock; start it with --clock manual to move time from here.");
  return section("Clock", state, h("div", { class: "spaced" }, controls), fired);
}

export const views = { overview, topics, groups, messages, lifecycle, dlq, transactions, clock };

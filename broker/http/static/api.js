// The HTTP front's JSON routes (docs/http.md), the only thing the dashboard talks to.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// The message transport's `id` is an unsigned 128-bit number, which JSON.parse would round to
// a float: quote it before parsing so the page keeps every digit (as a BigInt later).
const BIG_ID = /("id"\s*:\s*)(\d{16,})/g;

function authHeader() {
  const saved = sessionStorage.getItem("pocketmq.basic");
  return saved ? { Authorization: `Basic ${saved}` } : {};
}

export function setCredentials(accessKey, secretKey) {
  if (accessKey) sessionStorage.setItem("pocketmq.basic", btoa(`${accessKey}:${secretKey}`));
  else sessionStorage.removeItem("pocketmq.basic");
}

async function request(method, path, body) {
  const init = { method, headers: { Accept: "application/json", ...authHeader() } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    // Against the origin, never the page's URL: a page opened as http://ak:sk@host/... would
    // make fetch() refuse a relative URL (credentials in it); the browser's HTTP Basic cache
    // still signs the request.
    response = await fetch(new URL(path, location.origin), init);
  } catch (err) {
    throw new ApiError(0, "unreachable", `the broker did not answer ${path}: ${err.message}`);
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text.replace(BIG_ID, '$1"$2"')) : null;
  } catch {
    throw new ApiError(response.status, "bad_json", `${path} answered non-JSON (${response.status})`);
  }
  // /health and /ready answer 503 with the same JSON shape: a state, not a failure.
  if (!response.ok && !(response.status === 503 && data && data.checks)) {
    const error = (data && data.error) || {};
    throw new ApiError(response.status, error.code || "error", error.message || `${path}: HTTP ${response.status}`);
  }
  return data;
}

const q = (params) => {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(key, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
};
const seg = encodeURIComponent;

export const api = {
  health: () => request("GET", "/health"),
  ready: () => request("GET", "/ready"),
  broker: () => request("GET", "/api/broker"),
  topics: (system = false) => request("GET", `/api/topics${q({ system })}`),
  topicRates: () => request("GET", "/api/stats/topics"),
  topic: (topic) => request("GET", `/api/topics/${seg(topic)}`),
  groups: () => request("GET", "/api/groups"),
  lag: (group, topic) => request("GET", `/api/groups/${seg(group)}/lag${q({ topic })}`),
  messages: (topic, queueId, params) =>
    request("GET", `/api/topics/${seg(topic)}/queues/${queueId}/messages${q(params)}`),
  setState: (topic, queueId, offset, body) =>
    request("PUT", `/api/topics/${seg(topic)}/queues/${queueId}/messages/${offset}/state`, body),
  lifecycle: (id, topic) => request("GET", `/api/messages/${seg(id)}/lifecycle${q({ topic })}`),
  dlq: (group) => request("GET", `/api/groups/${seg(group)}/dlq`),
  resend: (group, ids) => request("POST", `/api/groups/${seg(group)}/dlq/resend`, { ids }),
  transactions: () => request("GET", "/api/transactions"),
  clock: () => request("GET", "/api/clock"),
  advance: (duration) => request("POST", "/api/clock/advance", { duration }),
};

#!/usr/bin/env node
/*
 * Apache RocketMQ's official Node.js 5.x client (rocketmq-client-nodejs) against a gRPC
 * endpoint: a Producer sends N messages (tag, keys, one user property each), then a
 * SimpleConsumer receives and acks them. Prints one JSON object on stdout:
 *
 *   {"ok": true, "endpoint": ..., "topic": ..., "group": ...,
 *    "sent": [{"index", "messageId", "body", "tag", "keys", "properties", "offset"}],
 *    "received": [{"messageId", "topic", "body", "tag", "keys", "properties",
 *                  "corrupted", "deliveryAttempt", "bornHost", "offset"}],
 *    "receiveCalls": n, "timings": {...}}
 *
 * and exits 0 when every sent message came back (received and acked), else 1 (the
 * JSON then has "ok": false and "error"). Client logs go to stderr.
 *
 * Options (argv wins over env):
 *   --endpoint HOST:PORT   NODE_MQ_ENDPOINT   (default 127.0.0.1:8081)
 *   --topic NAME           NODE_MQ_TOPIC      (default NodeTopic)
 *   --group NAME           NODE_MQ_GROUP      (default NodeGroup)
 *   --count N              NODE_MQ_COUNT      (default 10)
 *   --tag TAG              NODE_MQ_TAG        (default nodejs)
 *   --timeout-ms MS        NODE_MQ_TIMEOUT_MS (default 40000): overall deadline
 *   --verbose                NODE_MQ_VERBOSE=1: also log the client's info lines
 */
'use strict';

const { format } = require('node:util');
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

function parseOptions(argv, env) {
  const flags = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) throw new Error(`unexpected argument: ${arg}`);
    const eq = arg.indexOf('=');
    if (eq > 0) {
      flags[arg.slice(2, eq)] = arg.slice(eq + 1);
    } else if (arg === '--verbose') {
      flags.verbose = '1';
    } else {
      if (i + 1 >= argv.length) throw new Error(`${arg} needs a value`);
      flags[arg.slice(2)] = argv[++i];
    }
  }
  const pick = (flag, envName, fallback) => flags[flag] ?? env[envName] ?? fallback;
  const options = {
    endpoint: pick('endpoint', 'NODE_MQ_ENDPOINT', '127.0.0.1:8081'),
    topic: pick('topic', 'NODE_MQ_TOPIC', 'NodeTopic'),
    group: pick('group', 'NODE_MQ_GROUP', 'NodeGroup'),
    count: Number(pick('count', 'NODE_MQ_COUNT', '10')),
    tag: pick('tag', 'NODE_MQ_TAG', 'nodejs'),
    timeoutMs: Number(pick('timeout-ms', 'NODE_MQ_TIMEOUT_MS', '40000')),
    verbose: pick('verbose', 'NODE_MQ_VERBOSE', '') === '1',
  };
  if (!Number.isInteger(options.count) || options.count <= 0) {
    throw new Error(`--count must be a positive integer, got ${options.count}`);
  }
  if (!Number.isFinite(options.timeoutMs) || options.timeoutMs <= 0) {
    throw new Error(`--timeout-ms must be positive, got ${options.timeoutMs}`);
  }
  return options;
}

/** The client's default logger writes to ~/logs/rocketmq/; keep everything on stderr. */
function stderrLogger(name, verbose) {
  const line = (level, args) => {
    const text = format(...args); // the client logs printf-style: ('x=%s', x)
    process.stderr.write(`[${new Date().toISOString()}] [${name}] ${level} ${text}\n`);
  };
  return {
    info: (...args) => verbose && line('INFO', args),
    warn: (...args) => line('WARN', args),
    error: (...args) => line('ERROR', args),
    debug: (...args) => verbose && line('DEBUG', args),
  };
}

function mapToObject(map) {
  const out = {};
  if (map) for (const [k, v] of map.entries()) out[k] = v;
  return out;
}

function describeError(err) {
  if (!(err instanceof Error)) return String(err);
  let text = `${err.name}: ${err.message}`;
  if (err.code !== undefined) text += ` (code ${err.code})`;
  if (err.cause) text += `; cause: ${describeError(err.cause)}`;
  return text;
}

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function main() {
  const opts = parseOptions(process.argv.slice(2), process.env);
  const started = Date.now();
  const deadline = started + opts.timeoutMs;
  const remaining = () => Math.max(1, deadline - Date.now());
  const result = {
    ok: false,
    endpoint: opts.endpoint,
    topic: opts.topic,
    group: opts.group,
    sent: [],
    received: [],
    receiveCalls: 0,
    timings: {},
  };
  const clients = [];
  try {
    // -- send ------------------------------------------------------------------------------
    const producer = new Producer({
      endpoints: opts.endpoint,
      namespace: '',
      topics: [opts.topic],
      logger: stderrLogger('producer', opts.verbose),
    });
    clients.push(producer);
    await withTimeout(producer.startup(), remaining(), 'Producer.startup');
    result.timings.producerStartupMs = Date.now() - started;

    for (let i = 0; i < opts.count; i++) {
      const body = `node message ${i} from ${opts.topic}`;
      const keys = [`node-key-${i}`, `node-batch-${opts.topic}`];
      const properties = new Map([
        ['source', 'nodejs'],
        ['index', String(i)],
      ]);
      const receipt = await withTimeout(
        producer.send({ topic: opts.topic, tag: opts.tag, keys, properties, body: Buffer.from(body) }),
        remaining(),
        `Producer.send #${i}`,
      );
      result.sent.push({
        index: i,
        messageId: receipt.messageId,
        body,
        tag: opts.tag,
        keys,
        properties: mapToObject(properties),
        offset: receipt.offset,
      });
    }
    result.timings.sentMs = Date.now() - started;

    // -- receive ---------------------------------------------------------------------------
    const consumer = new SimpleConsumer({
      endpoints: opts.endpoint,
      namespace: '',
      consumerGroup: opts.group,
      subscriptions: new Map([[opts.topic, opts.tag]]),
      awaitDuration: 3000, // long-polling per receive call
      logger: stderrLogger('consumer', opts.verbose),
    });
    clients.push(consumer);
    await withTimeout(consumer.startup(), remaining(), 'SimpleConsumer.startup');
    result.timings.consumerStartupMs = Date.now() - started;

    const wanted = new Set(result.sent.map(s => s.messageId));
    const seen = new Set();
    while (seen.size < wanted.size && Date.now() < deadline) {
      result.receiveCalls++;
      const messages = await withTimeout(consumer.receive(16, 15000), remaining(), 'SimpleConsumer.receive');
      for (const view of messages) {
        result.received.push({
          messageId: view.messageId,
          topic: view.topic,
          body: view.body.toString('utf8'),
          tag: view.tag ?? null,
          keys: view.keys,
          properties: mapToObject(view.properties),
          corrupted: Boolean(view.corrupted),
          deliveryAttempt: view.deliveryAttempt ?? null,
          bornHost: view.bornHost ?? null,
          offset: view.offset ?? null,
        });
        await withTimeout(consumer.ack(view), remaining(), `SimpleConsumer.ack ${view.messageId}`);
        seen.add(view.messageId);
      }
    }
    result.timings.receivedMs = Date.now() - started;
    const missing = [...wanted].filter(id => !seen.has(id));
    if (missing.length) {
      throw new Error(`${missing.length} of ${wanted.size} sent messages not received before the deadline: ${missing.join(', ')}`);
    }
    result.ok = true;
  } catch (err) {
    result.error = describeError(err);
    process.stderr.write(`send_receive.js failed: ${err && err.stack ? err.stack : err}\n`);
  }
  for (const client of clients.reverse()) {
    try {
      await withTimeout(client.shutdown(), 5000, `${client.constructor.name}.shutdown`);
    } catch (err) {
      process.stderr.write(`shutdown: ${describeError(err)}\n`);
    }
  }
  result.timings.totalMs = Date.now() - started;
  process.stdout.write(`${JSON.stringify(result)}\n`);
  // Timers or streams the client leaves behind must not keep the process alive.
  process.exit(result.ok ? 0 : 1);
}

main().catch(err => {
  process.stdout.write(`${JSON.stringify({ ok: false, error: describeError(err) })}\n`);
  process.exit(1);
});

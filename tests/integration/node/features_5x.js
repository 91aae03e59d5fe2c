#!/usr/bin/env node
/*
 * Apache RocketMQ's official Node.js 5.x client (rocketmq-client-nodejs) against a gRPC
 * endpoint, one feature per run; prints one JSON object on stdout and exits 0 when the case's
 * own expectations held (the Python test checks the JSON again).
 *
 *   node features_5x.js --endpoint HOST:PORT --topic T --group G --case CASE [--ssl 1]
 *                       [--timeout-ms MS]
 *
 * Cases:
 *   sql92     6 messages with property a=0..5; a SimpleConsumer with
 *             FilterExpression('a >= 2 AND a < 5', FilterType.SQL) gets exactly a=2,3,4
 *   tls       send and receive 3 messages with sslEnabled: true (grpc-js verifies the server
 *             certificate against GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, set by the caller)
 *   priority  one message per priority 1,3,2,9 on a PRIORITY topic, then received:
 *             highest first (not 0: this client sends priority 0 as a NORMAL message,
 *             `!this.priority` in PublishingMessage, which a PRIORITY topic refuses)
 *   recall    a message delayed 60 s, recalled with its receipt's recallHandle; a second
 *             message delayed 2 s arrives, the recalled one never does
 */
'use strict';

const { format } = require('node:util');
const { Producer, SimpleConsumer, FilterExpression } = require('rocketmq-client-nodejs');
const { FilterType } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

function parseOptions(argv) {
  const flags = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || i + 1 >= argv.length) throw new Error(`bad argument ${argv[i]}`);
    flags[argv[i].slice(2)] = argv[i + 1];
  }
  for (const need of ['endpoint', 'topic', 'group', 'case']) {
    if (!flags[need]) throw new Error(`--${need} is required`);
  }
  return {
    endpoint: flags.endpoint,
    topic: flags.topic,
    group: flags.group,
    case: flags.case,
    ssl: flags.ssl === '1',
    timeoutMs: Number(flags['timeout-ms'] || '30000'),
  };
}

function stderrLogger(name) {
  const line = (level, args) =>
    process.stderr.write(`[${new Date().toISOString()}] [${name}] ${level} ${format(...args)}\n`);
  return {
    info: () => {},
    debug: () => {},
    warn: (...args) => line('WARN', args),
    error: (...args) => line('ERROR', args),
  };
}

function describeError(err) {
  if (!(err instanceof Error)) return String(err);
  let text = `${err.name}: ${err.message}`;
  if (err.code !== undefined) text += ` (code ${err.code})`;
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
  const opts = parseOptions(process.argv.slice(2));
  const started = Date.now();
  const deadline = started + opts.timeoutMs;
  const remaining = () => Math.max(1, deadline - Date.now());
  const result = { ok: false, case: opts.case, sent: [], received: [], timings: {} };
  const clients = [];
  const base = { endpoints: opts.endpoint, namespace: '', sslEnabled: opts.ssl };
  try {
    const producer = new Producer({ ...base, topics: [opts.topic], logger: stderrLogger('producer') });
    clients.push(producer);
    await withTimeout(producer.startup(), remaining(), 'Producer.startup');

    const messages = {
      sql92: [0, 1, 2, 3, 4, 5].map(a => ({ body: `a=${a}`, properties: new Map([['a', String(a)]]) })),
      tls: [0, 1, 2].map(i => ({ body: `tls ${i}` })),
      priority: [1, 3, 2, 9].map(p => ({ body: `priority ${p}`, priority: p })),
      recall: [
        { body: 'recall me', deliveryTimestamp: new Date(Date.now() + 60000) },
        { body: 'deliver me', deliveryTimestamp: new Date(Date.now() + 2000) },
      ],
    }[opts.case];
    if (!messages) throw new Error(`unknown case ${opts.case}`);
    for (const m of messages) {
      const receipt = await withTimeout(
        producer.send({ topic: opts.topic, tag: 'node5', ...m, body: Buffer.from(m.body) }),
        remaining(),
        `send ${m.body}`,
      );
      result.sent.push({ messageId: receipt.messageId, body: m.body, recallHandle: receipt.recallHandle || null });
    }
    if (opts.case === 'recall') {
      const recalled = await withTimeout(
        producer.recallMessage(opts.topic, result.sent[0].recallHandle),
        remaining(),
        'recallMessage',
      );
      result.recalledId = recalled.messageId;
    }

    const filter = opts.case === 'sql92'
      ? new FilterExpression('a >= 2 AND a < 5', FilterType.SQL)
      : new FilterExpression('*');
    const consumer = new SimpleConsumer({
      ...base,
      consumerGroup: opts.group,
      subscriptions: new Map([[opts.topic, filter]]),
      awaitDuration: 3000,
      logger: stderrLogger('consumer'),
    });
    clients.push(consumer);
    await withTimeout(consumer.startup(), remaining(), 'SimpleConsumer.startup');
    const wanted = { sql92: 3, tls: 3, priority: 4, recall: 1 }[opts.case];
    // recall: wait past the 2 s delivery, then a few more seconds for a recalled message to leak
    const quietUntil = opts.case === 'recall' ? Date.now() + 5000 : 0;
    while ((result.received.length < wanted || Date.now() < quietUntil) && Date.now() < deadline) {
      const views = await withTimeout(consumer.receive(16, 15000), remaining(), 'receive');
      for (const view of views) {
        result.received.push({
          messageId: view.messageId,
          body: view.body.toString('utf8'),
          a: view.properties.get('a') ?? null,
          priority: view.priority ?? null,
        });
        await withTimeout(consumer.ack(view), remaining(), 'ack');
      }
      if (opts.case === 'sql92' && result.received.length >= wanted) {
        // one more long poll: a message the filter should drop would come now
        for (const view of await consumer.receive(16, 15000)) {
          result.received.push({ messageId: view.messageId, body: view.body.toString('utf8') });
        }
        break;
      }
    }
    result.timings.totalMs = Date.now() - started;
    result.ok = result.received.length === wanted;
    if (!result.ok) result.error = `received ${result.received.length}, wanted ${wanted}`;
  } catch (err) {
    result.error = describeError(err);
    process.stderr.write(`features_5x.js failed: ${err && err.stack ? err.stack : err}\n`);
  }
  for (const client of clients.reverse()) {
    try {
      await withTimeout(client.shutdown(), 5000, `${client.constructor.name}.shutdown`);
    } catch (err) {
      process.stderr.write(`shutdown: ${describeError(err)}\n`);
    }
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
  process.exit(result.ok ? 0 : 1);
}

main().catch(err => {
  process.stdout.write(`${JSON.stringify({ ok: false, error: describeError(err) })}\n`);
  process.exit(1);
});

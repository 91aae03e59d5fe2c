#!/usr/bin/env node
/*
 * Apache RocketMQ's official Node.js 5.x client (rocketmq-client-nodejs) against a gRPC
 * endpoint, one feature per run; prints one JSON object on stdout and exits 0 when the case's
 * own expectations held (the Python test checks the JSON again).
 *
 *   node features_5x.js --endpoint HOST:PORT --topic T --group G --case CASE [--ssl 1]
 *                       [--access-key AK --secret-key SK] [--timeout-ms MS]
 *
 * Cases:
 *   sql92     6 messages with property a=0..5; a SimpleConsumer with
 *             FilterExpression('a >= 2 AND a < 5', FilterType.SQL) gets exactly a=2,3,4
 *   tls       send and receive 3 messages with sslEnabled: true (grpc-js verifies the server
 *             certificate against GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, set by the caller)
 *   acl       the same with sessionCredentials from --access-key / --secret-key (the caller
 *             also runs it with a wrong secret, which must fail)
 *   priority  one message per priority 1,3,2,9 on a PRIORITY topic, then received:
 *             highest first (not 0: this client sends priority 0 as a NORMAL message,
 *             `!this.priority` in PublishingMessage, which a PRIORITY topic refuses)
 *   recall    a message delayed 60 s, recalled with its receipt's recallHandle; a second
 *             message delayed 2 s arrives, the recalled one never does
 *   tags      7 messages tagged TagA, TagB, TagC in turn (the last one TagA), all in one
 *             message group of a FIFO topic, so in one queue; a SimpleConsumer (of a group
 *             that is not orderly) with FilterExpression('TagA || TagC') must get exactly the
 *             five, in order: the queue is read in order, so once the last one is in, a TagB
 *             message let through would be in too
 *   push      6 messages taken by a PushConsumer's messageListener
 *   fifo      8 messages in message groups fifo-0 / fifo-1 (alternating) on a FIFO topic,
 *             taken by a PushConsumer of an orderly group (the client's FifoConsumeService);
 *             the caller checks each group's order
 *   transaction  four transactions (beginTransaction, send(message, tx)): one committed, one
 *             rolled back, two left open; prints a line "SENT" and waits for the broker's
 *             check-back (the caller moves the broker's manual clock), whose TransactionChecker
 *             commits "check commits me" and rolls back "check rolls back me"; a SimpleConsumer
 *             then gets the two committed ones only (one more long poll shows nothing else)
 *
 * A PushConsumer's shutdown waits for its in-flight long poll (at least 5 s, the proxy's
 * minimum), so the push cases exit without waiting for it; the broker copes with a vanished
 * client.
 */
'use strict';

const { format } = require('node:util');
const {
  Producer, SimpleConsumer, PushConsumer, FilterExpression, ConsumeResult,
} = require('rocketmq-client-nodejs');
const {
  FilterType, TransactionResolution,
} = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');


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
    credentials: flags['access-key']
      ? { accessKey: flags['access-key'], accessSecret: flags['secret-key'] || '' }
      : undefined,
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
  const base = {
    endpoints: opts.endpoint,
    namespace: '',
    sslEnabled: opts.ssl,
    ...(opts.credentials ? { sessionCredentials: opts.credentials } : {}),
  };
  try {
    result.checked = [];
    const checker = {
      // the broker's check-back: decide by the body, as an application would by its state
      async check(view) {
        const body = view.body.toString('utf8');
        result.checked.push(body);
        return body === 'check commits me' ? TransactionResolution.COMMIT : TransactionResolution.ROLLBACK;
      },
    };
    const producer = new Producer({
      ...base,
      topics: [opts.topic],
      logger: stderrLogger('producer'),
      ...(opts.case === 'transaction' ? { checker } : {}),
    });
    clients.push(producer);
    await withTimeout(producer.startup(), remaining(), 'Producer.startup');

    const messages = {
      sql92: [0, 1, 2, 3, 4, 5].map(a => ({ body: `a=${a}`, properties: new Map([['a', String(a)]]) })),
      tls: [0, 1, 2].map(i => ({ body: `tls ${i}` })),
      acl: [0, 1, 2].map(i => ({ body: `acl ${i}` })),
      priority: [1, 3, 2, 9].map(p => ({ body: `priority ${p}`, priority: p })),
      recall: [
        { body: 'recall me', deliveryTimestamp: new Date(Date.now() + 60000) },
        { body: 'deliver me', deliveryTimestamp: new Date(Date.now() + 2000) },
      ],
      tags: [0, 1, 2, 3, 4, 5, 6].map(i => {
        const tag = i === 6 ? 'TagA' : ['TagA', 'TagB', 'TagC'][i % 3];
        return { body: `${tag} ${i}`, tag, messageGroup: 'tags' };
      }),
      push: [0, 1, 2, 3, 4, 5].map(i => ({ body: `push ${i}` })),
      fifo: [0, 1, 2, 3, 4, 5, 6, 7].map(i => ({ body: `fifo-${i % 2} ${i}`, messageGroup: `fifo-${i % 2}` })),
      transaction: [
        { body: 'commit me', end: 'commit' },
        { body: 'roll back me', end: 'rollback' },
        { body: 'check commits me' },
        { body: 'check rolls back me' },
      ],
    }[opts.case];
    if (!messages) throw new Error(`unknown case ${opts.case}`);
    for (const { end, ...m } of messages) {
      const tx = opts.case === 'transaction' ? producer.beginTransaction() : undefined;
      const receipt = await withTimeout(
        producer.send({ topic: opts.topic, tag: 'node5', ...m, body: Buffer.from(m.body) }, tx),
        remaining(),
        `send ${m.body}`,
      );
      if (end) await withTimeout(tx[end](), remaining(), `${end} ${m.body}`);
      result.sent.push({ messageId: receipt.messageId, body: m.body, recallHandle: receipt.recallHandle || null });
    }
    if (opts.case === 'transaction') {
      process.stdout.write('SENT\n');
      while (new Set(result.checked).size < 2 && Date.now() < deadline) {
        await new Promise(resolve => setTimeout(resolve, 100));
      }
    }
    const view = v => ({
      messageId: v.messageId,
      body: v.body.toString('utf8'),
      a: v.properties.get('a') ?? null,
      priority: v.priority ?? null,
      messageGroup: v.messageGroup ?? null,
      tag: v.tag ?? null,
    });
    if (opts.case === 'push' || opts.case === 'fifo') {
      const wantedPush = messages.length;
      let done;
      const all = new Promise(resolve => { done = resolve; });
      const consumer = new PushConsumer({
        ...base,
        consumerGroup: opts.group,
        subscriptions: new Map([[opts.topic, new FilterExpression('*')]]),
        messageListener: {
          async consume(v) {
            result.received.push(view(v));
            if (result.received.length >= wantedPush) done();
            return ConsumeResult.SUCCESS;
          },
        },
        logger: stderrLogger('push consumer'),
      });
      clients.push(consumer);
      await withTimeout(consumer.startup(), remaining(), 'PushConsumer.startup');
      await withTimeout(all, remaining(), `${wantedPush} messages through the messageListener`);
      result.timings.totalMs = Date.now() - started;
      result.ok = new Set(result.received.map(r => r.messageId)).size === wantedPush;
      if (!result.ok) result.error = `received ${result.received.length}, wanted ${wantedPush}`;
    } else {
      await consumeSimple(producer, view);
    }
  } catch (err) {
    result.error = describeError(err);
    process.stderr.write(`features_5x.js failed: ${err && err.stack ? err.stack : err}\n`);
  }
  return finish(result, clients);

  // every other case: a SimpleConsumer takes what arrives
  async function consumeSimple(producer, view) {
    if (opts.case === 'recall') {
      const recalled = await withTimeout(
        producer.recallMessage(opts.topic, result.sent[0].recallHandle),
        remaining(),
        'recallMessage',
      );
      result.recalledId = recalled.messageId;
    }

    const filter = {
      sql92: new FilterExpression('a >= 2 AND a < 5', FilterType.SQL),
      tags: new FilterExpression('TagA || TagC'),
    }[opts.case] || new FilterExpression('*');
    const consumer = new SimpleConsumer({
      ...base,
      consumerGroup: opts.group,
      subscriptions: new Map([[opts.topic, filter]]),
      awaitDuration: 3000,
      logger: stderrLogger('consumer'),
    });
    clients.push(consumer);
    await withTimeout(consumer.startup(), remaining(), 'SimpleConsumer.startup');
    const wanted = { sql92: 3, tags: 5, tls: 3, acl: 3, priority: 4, recall: 1, transaction: 2 }[opts.case];
    // recall: wait past the 2 s delivery, then a few more seconds for a recalled message to leak
    const quietUntil = opts.case === 'recall' ? Date.now() + 5000 : 0;
    while ((result.received.length < wanted || Date.now() < quietUntil) && Date.now() < deadline) {
      const views = await withTimeout(consumer.receive(16, 15000), remaining(), 'receive');
      for (const v of views) {
        result.received.push(view(v));
        await withTimeout(consumer.ack(v), remaining(), 'ack');
      }
      const quietPoll = opts.case === 'sql92' || opts.case === 'transaction';
      if (quietPoll && result.received.length >= wanted) {
        // one more long poll: a message filtered out or rolled back would come now
        for (const v of await consumer.receive(16, 15000)) result.received.push(view(v));
        break;
      }
    }
    result.timings.totalMs = Date.now() - started;
    result.ok = result.received.length === wanted;
    if (!result.ok) result.error = `received ${result.received.length}, wanted ${wanted}`;
  }
}

async function finish(result, clients) {
  for (const client of clients.reverse()) {
    if (client instanceof PushConsumer) continue; // see the top of the file
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

#!/usr/bin/env node
/*
 * ali-ons (npm, the pure-JavaScript RocketMQ 4.x remoting client) against a plain RocketMQ name
 * server: no Aliyun HTTP name-server lookup (`nameSrv` instead of `onsAddr`), optional ACL
 * signature (`accessKey`/`secretKey`: ali-ons signs every request with HMAC-SHA1 over the sorted
 * extFields and the body, as RocketMQ's AclClientRPCHook). One case per run; prints one JSON
 * object on stdout ({"ok": true|false, "case", "sent", "received", "brokerAddrs", ...}) and
 * exits 0 when the case's expectations held (checked here and again by the Python test).
 *
 *   node ali_ons.js --namesrv HOST:PORT --topic T --group G --case CASE
 *                   [--count N] [--access-key AK --secret-key SK] [--timeout-ms MS]
 *
 * Cases:
 *   tags      N messages, tags TagA/TagB alternating, keys and a user property; consumer A
 *             subscribes "TagA" (gets only those), consumer B (another group) "*" (gets all)
 *   sql92     N messages with property a=i; subscription {expressionType: 'SQL92',
 *             subString: 'a >= 2 AND a < 5'} gets exactly those
 *   sharding  N messages with one shardingKey: one queue, received in send order. The key is
 *             'order-7' (md5 -> queue 2 of 4): ali-ons 3.12.0 ignores a key that hashes to
 *             queue 0 (`if (queueId && ...)` in TopicPublishInfo: 0 is falsy) and round-robins
 *   delay     one message with delayTimeLevel 1 (1 s): delivered no earlier than 1 s after
 *             it was stored
 *   sendonly  N messages sent, none consumed (the ACL refusal case: expects the send to fail)
 */
'use strict';

const { format } = require('node:util');
const { Producer, Consumer, Message } = require('ali-ons');

function parseOptions(argv) {
  const flags = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) throw new Error(`unexpected argument: ${arg}`);
    if (i + 1 >= argv.length) throw new Error(`${arg} needs a value`);
    flags[arg.slice(2)] = argv[++i];
  }
  for (const need of ['namesrv', 'topic', 'group', 'case']) {
    if (!flags[need]) throw new Error(`--${need} is required`);
  }
  return {
    namesrv: flags.namesrv,
    topic: flags.topic,
    group: flags.group,
    case: flags.case,
    count: Number(flags.count || '6'),
    accessKey: flags['access-key'],
    secretKey: flags['secret-key'],
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

// ali-ons asserts an HTTP client for the Aliyun name-server lookup; with nameSrv it is unused.
const noHttp = {
  request() {
    throw new Error('no HTTP name-server lookup: nameSrv is set');
  },
};

async function main() {
  const opts = parseOptions(process.argv.slice(2));
  const started = Date.now();
  const deadline = started + opts.timeoutMs;
  const remaining = () => Math.max(1, deadline - Date.now());
  const common = {
    nameSrv: opts.namesrv,
    httpclient: noHttp,
    ...(opts.accessKey ? { accessKey: opts.accessKey, secretKey: opts.secretKey } : {}),
  };
  const result = { ok: false, case: opts.case, sent: [], received: {}, brokerAddrs: [], timings: {} };
  const clients = [];
  try {
    const producer = new Producer({
      ...common,
      producerGroup: `${opts.group}_PRODUCER`,
      logger: stderrLogger('producer'),
    });
    clients.push(producer);
    await withTimeout(producer.ready(), remaining(), 'Producer.ready');

    // -- send ------------------------------------------------------------------------------
    const count = opts.case === 'delay' ? 1 : opts.count;
    for (let i = 0; i < count; i++) {
      const tag = opts.case === 'tags' ? (i % 2 === 0 ? 'TagA' : 'TagB') : 'ons';
      const body = `ali-ons ${opts.case} ${i}`;
      const msg = new Message(opts.topic, tag, body);
      msg.keys = [`ons-key-${i}`];
      msg.properties.a = String(i);
      if (opts.case === 'sharding') msg.shardingKey = 'order-7';
      if (opts.case === 'delay') msg.delayTimeLevel = 1;
      const sendResult = await withTimeout(producer.send(msg), remaining(), `Producer.send #${i}`);
      result.sent.push({
        index: i,
        msgId: sendResult.msgId,
        status: sendResult.sendStatus,
        queueId: sendResult.messageQueue && sendResult.messageQueue.queueId,
        queueOffset: sendResult.queueOffset,
        tag,
        body,
        sentAt: Date.now(),
      });
    }
    result.brokerAddrs = Array.from(producer._mqClient._brokerAddrTable.values()).map(addrs => addrs[0]);
    result.channels = Array.from(producer._mqClient._channels.keys());
    result.timings.sentMs = Date.now() - started;
    if (opts.case === 'sendonly') {
      result.ok = true;
      return finish(result, clients, started);
    }

    // -- consume ---------------------------------------------------------------------------
    const subscriptions = {
      tags: [['A', 'TagA'], ['B', '*']],
      sql92: [['S', { expressionType: 'SQL92', subString: 'a >= 2 AND a < 5' }]],
      sharding: [['O', '*']],
      delay: [['D', '*']],
    }[opts.case];
    if (!subscriptions) throw new Error(`unknown case ${opts.case}`);
    const expected = {
      tags: { A: result.sent.filter(s => s.tag === 'TagA').length, B: result.sent.length },
      sql92: { S: result.sent.filter(s => s.index >= 2 && s.index < 5).length },
      sharding: { O: result.sent.length },
      delay: { D: 1 },
    }[opts.case];
    const waits = [];
    for (const [name, expression] of subscriptions) {
      const got = (result.received[name] = []);
      const consumer = new Consumer({
        ...common,
        consumerGroup: `${opts.group}_${name}`,
        instanceName: `ons-${name}`,
        consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET',
        logger: stderrLogger(`consumer ${name}`),
      });
      clients.push(consumer);
      waits.push(
        new Promise(resolve => {
          consumer.subscribe(opts.topic, expression, async msg => {
            got.push({
              msgId: msg.msgId,
              body: msg.body.toString('utf8'),
              tag: msg.tags,
              keys: msg.keys,
              a: msg.properties.a,
              queueId: msg.queueId,
              queueOffset: msg.queueOffset,
              storeTimestamp: msg.storeTimestamp,
              bornTimestamp: msg.bornTimestamp,
              receivedAt: Date.now(),
            });
            if (got.length >= expected[name]) resolve();
          });
        }),
      );
      consumer.on('error', err => process.stderr.write(`consumer ${name} error: ${describeError(err)}\n`));
    }
    await withTimeout(Promise.all(waits), remaining(), 'consuming');
    // A moment more, so a message the filter should have dropped would show up.
    await new Promise(resolve => setTimeout(resolve, 1000));
    result.timings.receivedMs = Date.now() - started;
    result.ok = true;
  } catch (err) {
    result.error = describeError(err);
    process.stderr.write(`ali_ons.js failed: ${err && err.stack ? err.stack : err}\n`);
  }
  return finish(result, clients, started);
}

async function finish(result, clients, started) {
  for (const client of clients.reverse()) {
    try {
      await withTimeout(client.close(), 5000, `${client.constructor.name}.close`);
    } catch (err) {
      process.stderr.write(`close: ${describeError(err)}\n`);
    }
  }
  result.timings.totalMs = Date.now() - started;
  process.stdout.write(`${JSON.stringify(result)}\n`);
  process.exit(result.ok ? 0 : 1);
}

main().catch(err => {
  process.stdout.write(`${JSON.stringify({ ok: false, error: describeError(err) })}\n`);
  process.exit(1);
});

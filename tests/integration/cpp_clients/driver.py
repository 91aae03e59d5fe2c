"""One case of a rocketmq-client-cpp based Python client (run by test_cpp_clients.py with the
client on PYTHONPATH); prints one JSON line, {"sent": [...], "received": [...], ...}.

usage: driver.py NAMESRV TOPIC CASE N

* plain: send ``n`` messages, receive them with a push consumer;
* orderly: the same through one queue (sharding key / queue selector), an orderly consumer;
* tags: ``n`` messages through one queue tagged TagA, TagB, TagC in turn (the last one TagA);
  an orderly consumer subscribed with ``TagA || TagC``: it must get exactly those, in order
  (one queue and an orderly consumer: once the last one is in, nothing filtered out is late);
* transaction (Apache's API): commit the even ones, roll back the odd ones, in the local
  transaction;
* check (Apache's API): every local transaction answers UNKNOWN, so the broker checks back;
  prints ``SENT`` once sent (the test then moves the broker's manual clock) and the checker
  commits the even ones, rolls back the odd ones;
* delay: as plain, each message with delay level 1 (1 s); ``delays`` in the output are the
  received messages' store minus born timestamps (ms);
* acl: first a producer with a wrong secret key (``ACL_AK``, ``ACL_SK`` + "x") must fail to
  send, then producer and consumer with the right one (``set_session_credentials``) run as
  plain; ``refused`` in the output is the failed send's error.
"""

import json
import os
import sys
import threading
import time

from rocketmq import client as c
from rocketmq.exceptions import RocketMQException

namesrv, topic, case, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
APACHE = hasattr(c.Producer, "set_name_server_address")  # rocketmq-client-python 2.x API
tag = f"{case}{os.getpid()}"
WAIT_S = float(os.environ.get("CLIENT_WAIT_S", "40"))
ONE_QUEUE = case in ("orderly", "tags")
TAGS = ("TagA", "TagB", "TagC")
CREDENTIALS = (os.environ.get("ACL_AK", ""), os.environ.get("ACL_SK", ""), "ALIYUN")


def point(obj, credentials=None):
    if APACHE:
        obj.set_name_server_address(namesrv)
    else:
        obj.set_namesrv_addr(namesrv)
    if credentials:
        obj.set_session_credentials(*credentials)


def message(body, tags="t"):
    m = c.Message(topic)
    m.set_keys(body)
    m.set_tags(tags)
    m.set_body(body)
    return m


def wait_for(done):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and not done():
        time.sleep(0.2)


def tag_of(i):
    return "TagA" if i == n - 1 else TAGS[i % 3]


out = {}
sent = []
credentials = CREDENTIALS if case == "acl" else None
if case == "acl":
    wrong = c.Producer(f"PW{tag}")
    point(wrong, (CREDENTIALS[0], CREDENTIALS[1] + "x", CREDENTIALS[2]))
    wrong.set_timeout(3000)
    wrong.start()
    try:
        wrong.send_sync(message("refused"))
        out["refused"] = None
    except RocketMQException as error:
        out["refused"] = f"{type(error).__name__}: {error}"

if case in ("transaction", "check"):
    state = c.TransactionStatus
    checked = []

    def checker(msg):
        body = msg.body.decode()
        checked.append(body)
        return state.COMMIT if int(body[1:]) % 2 == 0 else state.ROLLBACK

    producer = c.TransactionMQProducer(f"P{tag}", checker)
    point(producer)
    producer.start()
    for i in range(n):
        body = f"m{i}"
        verdict = state.COMMIT if i % 2 == 0 else state.ROLLBACK
        if case == "check":
            verdict = state.UNKNOWN
        producer.send_message_in_transaction(message(body), lambda msg, arg, v=verdict: v)
        if i % 2 == 0:
            sent.append(body)
    if case == "check":
        print("SENT", flush=True)
        wait_for(lambda: len(set(checked)) >= n)
        out["checked"] = sorted(set(checked))
else:
    if ONE_QUEUE and APACHE:
        producer = c.Producer(f"P{tag}", orderly=True)
    else:
        producer = c.Producer(f"P{tag}")
    point(producer, credentials)
    producer.start()
    for i in range(n):
        body = f"m{i}"
        msg = message(body, tag_of(i) if case == "tags" else "t")
        if case == "delay":
            msg.set_delay_time_level(1)
        if not ONE_QUEUE:
            result = producer.send_sync(msg)
        elif APACHE:
            result = producer.send_orderly_with_sharding_key(msg, "k")
        else:
            result = producer.send_orderly(msg, 7)
        assert int(result.status) == 0, result.status
        if case != "tags" or tag_of(i) != "TagB":
            sent.append(body)

got, tags, delays, lock = [], [], [], threading.Lock()


def on_message(msg):
    with lock:
        got.append(msg.body.decode())
        delays.append(msg.store_timestamp - msg.born_timestamp)
        tags.append(msg.tags.decode() if isinstance(msg.tags, bytes) else msg.tags)
    return c.ConsumeStatus.CONSUME_SUCCESS if APACHE else None


consumer = c.PushConsumer(f"C{tag}", orderly=ONE_QUEUE)
point(consumer, credentials)
if case == "tags":
    consumer.subscribe(topic, on_message, "TagA || TagC")
else:
    consumer.subscribe(topic, on_message)
consumer.start()
last = f"m{n - 1}"
if case == "tags":
    wait_for(lambda: last in got)
else:
    wait_for(lambda: len(set(got)) >= len(sent))
result = {**out, "sent": sent, "received": got, "tags": tags, "delays": delays}
print(json.dumps(result), flush=True)
os._exit(0)  # the C library's shutdown can hang; the broker copes with a vanished client

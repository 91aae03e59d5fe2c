"""One case of a rocketmq-client-cpp based Python client (run by test_cpp_clients.py with the
client on PYTHONPATH): send ``n`` messages, then receive them with a push consumer; prints one
JSON line, {"sent": [...], "received": [...]}.

usage: driver.py NAMESRV TOPIC plain|orderly|transaction N
"""

import json
import os
import sys
import threading
import time

from rocketmq import client as c

namesrv, topic, case, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
APACHE = hasattr(c.Producer, "set_name_server_address")  # rocketmq-client-python 2.x API
tag = f"{case}{os.getpid()}"


def point(obj):
    if APACHE:
        obj.set_name_server_address(namesrv)
    else:
        obj.set_namesrv_addr(namesrv)


def message(body):
    m = c.Message(topic)
    m.set_keys(body)
    m.set_tags("t")
    m.set_body(body)
    return m


sent = []
if case == "transaction":
    state = c.TransactionStatus
    producer = c.TransactionMQProducer(f"P{tag}", lambda msg: state.COMMIT)
    point(producer)
    producer.start()
    for i in range(n):
        body = f"m{i}"
        verdict = state.COMMIT if i % 2 == 0 else state.ROLLBACK
        producer.send_message_in_transaction(message(body), lambda msg, arg, v=verdict: v)
        if verdict == state.COMMIT:
            sent.append(body)
else:
    orderly = case == "orderly"
    if orderly and APACHE:
        producer = c.Producer(f"P{tag}", orderly=True)
    else:
        producer = c.Producer(f"P{tag}")
    point(producer)
    producer.start()
    for i in range(n):
        body = f"m{i}"
        if not orderly:
            result = producer.send_sync(message(body))
        elif APACHE:
            result = producer.send_orderly_with_sharding_key(message(body), "k")
        else:
            result = producer.send_orderly(message(body), 7)
        assert int(result.status) == 0, result.status
        sent.append(body)

got, lock = [], threading.Lock()


def on_message(msg):
    with lock:
        got.append(msg.body.decode())
    return c.ConsumeStatus.CONSUME_SUCCESS if APACHE else None


consumer = c.PushConsumer(f"C{tag}", orderly=case == "orderly")
point(consumer)
consumer.subscribe(topic, on_message)
consumer.start()
deadline = time.monotonic() + float(os.environ.get("CLIENT_WAIT_S", "40"))
while time.monotonic() < deadline and len(set(got)) < len(sent):
    time.sleep(0.2)
print(json.dumps({"sent": sent, "received": got}), flush=True)
os._exit(0)  # the C library's shutdown can hang; the broker copes with a vanished client

# tests/remote/py/raw_client.py URL: a NATS client nobody here wrote,
# in the raw NATS protocol (plain Python, no library), as a service in
# another language talks to a seda stage: two JSON bodies published into
# the stage "price" (stream PYJSON) with a Nats-Msg-Id and
# Seda-Slip: nats:results.py, the results read on that plain subject.
# Prints per result "raw <body>" and "types <key>=<python type> ...",
# sorted by the id the result carries.
import json
import socket
import sys
import time

url = sys.argv[1]
hostport = url.split("://", 1)[-1]
host, port = hostport.rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=30)
f = s.makefile("rb")


def line():
    ln = f.readline()
    if not ln:
        raise SystemExit("connection closed")
    return ln.rstrip(b"\r\n")


assert line().startswith(b"INFO ")
s.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,'
          b'"no_responders":true,"protocol":1,"lang":"python-raw"}\r\n')
s.sendall(b"SUB results.py 1\r\nPING\r\n")
while line() != b"PONG":
    pass


def hpub(subject, headers, body):
    h = "NATS/1.0\r\n" + "".join("%s: %s\r\n" % kv for kv in headers) + "\r\n"
    hb = h.encode()
    s.sendall(("HPUB %s %d %d\r\n" % (subject, len(hb), len(hb) + len(body)))
              .encode() + hb + body + b"\r\n")


bodies = [("py-order-1", b'{"qty":2,"unit":1.5}'), ("py-n-1", b'{"n": 3}')]
for mid, body in bodies:
    hpub("seda.PYJSON.price", [("Nats-Msg-Id", mid),
                               ("Seda-Slip", "nats:results.py")], body)
s.sendall(b"PING\r\n")

results = []
deadline = time.time() + 30
while len(results) < len(bodies) and time.time() < deadline:
    ln = line()
    if ln == b"PING":
        s.sendall(b"PONG\r\n")
        continue
    if not ln.startswith(b"HMSG "):
        continue
    parts = ln.split()
    total = int(parts[-1])
    hlen = int(parts[-2])
    data = f.read(total + 2)[:total]
    results.append(data[hlen:])

out = []
for body in results:
    v = json.loads(body)
    types = " ".join("%s=%s" % (k, type(v[k]).__name__) for k in sorted(v)
                     if not isinstance(v[k], dict))
    out.append((v.get("id", ""), "raw %s\ntypes %s" % (body.decode(), types)))
for _, text in sorted(out):
    print(text)
print("got %d" % len(results))
s.close()

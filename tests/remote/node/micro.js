// tests/remote/node/micro.js URL COUNT: the official Node.js NATS client
// (npm "nats") against a seda-lua service "orders" as against any NATS
// service: plain nc.request calls (answered by the itinerary, or with
// Nats-Service-Error and Nats-Service-Error-Code), then the client's
// ServiceClient (ping, info, stats on $SRV.*), then COUNT requests at
// once, each of which must be answered exactly once (several seda
// processes share them through the queue group).  Prints one line per
// check: "price <total> <subject> <X-Tag seen> <Content-Type>",
// "echo <body>", "error <endpoint> <code> <description>", "ping <name>
// <version> <id>" and "info <type> <description> <endpoints>" per
// instance, "shared <answered> <by a> <by b> <wrong>", "stats
// <instances> <endpoint>:<requests>:<errors>:<time > 0>:<last error
// code>,..." summed over the instances.
const { connect, JSONCodec, StringCodec, headers } = require("nats");

function err(m) {
  const h = m.headers;
  return h ? `${h.get("Nats-Service-Error-Code")} ${h.get("Nats-Service-Error")}` : "none";
}

(async () => {
  const url = process.argv[2];
  const count = Number(process.argv[3]);
  const nc = await connect({ servers: url });
  const jc = JSONCodec();
  const sc = StringCodec();
  const out = (s) => process.stdout.write(s + "\n");

  const h = headers();
  h.set("Content-Type", "application/json");
  h.set("X-Tag", "t1");
  let m = await nc.request("orders.price", jc.encode({ qty: 7 }), { timeout: 10000, headers: h });
  const p = jc.decode(m.data);
  out(`price ${p.total} ${p.subject} ${p.tag} ${m.headers && m.headers.get("Content-Type")}`);

  m = await nc.request("orders.echo", sc.encode("hello there"), { timeout: 10000 });
  out(`echo ${sc.decode(m.data)}`);

  for (const ep of ["fail", "refuse", "slow"]) {
    m = await nc.request(`orders.${ep}`, sc.encode("{}"), { timeout: 10000 });
    out(`error ${ep} ${err(m)}`);
  }

  // A request nobody waits for: handled, nothing sent back.
  nc.publish("orders.price", jc.encode({ qty: 1 }), { headers: h });

  const svc = nc.services.client();
  for await (const r of await svc.ping("orders")) out(`ping ${r.name} ${r.version} ${r.id}`);
  for await (const r of await svc.info("orders")) {
    const eps = r.endpoints.map((e) => `${e.name}=${e.subject}@${e.queue_group}`).sort();
    out(`info ${r.type} ${r.description.replace(/ /g, "_")} ${eps.join(",")}`);
  }

  // COUNT at once, each its own qty: every answer must be its own.
  const ps = [];
  for (let i = 1; i <= count; i++)
    ps.push(nc.request("orders.price", jc.encode({ qty: i }), { timeout: 30000, headers: h })
      .then((r) => ({ i, r: jc.decode(r.data) })));
  const res = await Promise.allSettled(ps);
  let ok = 0, a = 0, b = 0, wrong = 0;
  for (const x of res) {
    if (x.status !== "fulfilled") { wrong++; continue; }
    if (x.value.r.total !== x.value.i * 3) { wrong++; continue; }
    ok++;
    if (x.value.r.by === "a") a++;
    if (x.value.r.by === "b") b++;
  }
  out(`shared ${ok} ${a} ${b} ${wrong}`);

  // Summed over the instances (each answers for itself).
  const sum = {};
  let n = 0;
  for await (const r of await svc.stats("orders")) {
    n++;
    if (r.type !== "io.nats.micro.v1.stats_response" || !r.started) out("stats malformed");
    for (const e of r.endpoints) {
      const s = sum[e.name] || (sum[e.name] = { req: 0, err: 0, time: 0, last: "" });
      s.req += e.num_requests;
      s.err += e.num_errors;
      s.time += e.processing_time;
      if (e.last_error) s.last = e.last_error.split(":")[0];
    }
  }
  const eps = Object.keys(sum).sort().map((k) =>
    `${k}:${sum[k].req}:${sum[k].err}:${sum[k].time > 0}:${sum[k].last}`);
  out(`stats ${n} ${eps.join(",")}`);
  await nc.close();
})().catch((e) => { console.error("ERROR", e); process.exit(1); });

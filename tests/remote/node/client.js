// tests/remote/node/client.js URL COUNT: the official Node.js NATS client
// (npm "nats") as a service in another language would use it: JSON
// published through JetStream into the seda stage "enrich" (stream
// NODE) with a user header and Seda-Slip: nats:results.node, the
// results read on that plain subject; then one body that is not JSON.
// Prints "result <n> <doubled> <tenant> <done> <tags[1]> <tags[2]>"
// per result and "got <count> sum <sum>".
const { connect, JSONCodec, headers } = require("nats");

(async () => {
  const url = process.argv[2];
  const count = Number(process.argv[3]);
  const nc = await connect({ servers: url });
  const jc = JSONCodec();
  const sub = nc.subscribe("results.node", { max: count });
  await nc.flush();
  const js = nc.jetstream();
  for (let i = 1; i <= count; i++) {
    const h = headers();
    h.set("tenant", "t" + i);
    h.set("Seda-Slip", "nats:results.node");
    await js.publish("seda.NODE.enrich", jc.encode({ n: i, tags: ["a", null] }),
                     { headers: h });
  }
  const hb = headers();
  hb.set("Content-Type", "application/json");
  await js.publish("seda.NODE.enrich", new TextEncoder().encode("{\"n\": 1,"),
                   { headers: hb });
  let got = 0, sum = 0;
  const timer = setTimeout(() => {
    console.log(`timeout: got ${got}`);
    process.exit(1);
  }, 20000);
  for await (const m of sub) {
    const v = jc.decode(m.data);
    const h = m.headers;
    console.log(`result ${v.n} ${v.doubled} ${h.get("tenant")} ${h.get("done")}` +
                ` ${v.tags[0]} ${v.tags[1]} ${h.get("Content-Type")} ${v.null_kept}`);
    sum += v.doubled;
    got++;
  }
  clearTimeout(timer);
  console.log(`got ${got} sum ${sum}`);
  await nc.close();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});

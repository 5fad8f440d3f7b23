// tests/remote/node/client.js URL COUNT: the official Node.js NATS client
// (npm "nats") as a service in another language would use it: JSON
// published through JetStream into the seda stage "enrich" (stream
// NODE) with a user header and Seda-Slip: nats:results.node, the
// results read on that plain subject; then one body that is not JSON.
// Meanwhile it watches the stage without taking work: a core
// subscription on the tap subject seda-tap.NODE.enrich, and a tap stream
// (Limits retention) it makes on seda-tap.NODE.> for a JetStream
// consumer.  Prints "result <n> <doubled> <tenant> <done> <tags[1]>
// <tags[2]> <Content-Type> <null kept>" per result, "got <count> sum
// <sum>", "tap <messages seen> <with their tenant header>" and
// "tapstream <messages> <consumer delivered>".
const { connect, JSONCodec, headers, RetentionPolicy, nanos } = require("nats");

(async () => {
  const url = process.argv[2];
  const count = Number(process.argv[3]);
  const nc = await connect({ servers: url });
  const jc = JSONCodec();
  const sub = nc.subscribe("results.node", { max: count });
  let tapped = 0, tappedTenant = 0;
  const tap = nc.subscribe("seda-tap.NODE.enrich", {
    callback: (err, m) => {
      if (err) return;
      tapped++;
      if (m.headers && /^t[0-9]+$/.test(m.headers.get("tenant"))) tappedTenant++;
    },
  });
  const jsm = await nc.jetstreamManager();
  await jsm.streams.add({ name: "NODE_TAP", subjects: ["seda-tap.NODE.>"],
                          retention: RetentionPolicy.Limits,
                          max_age: nanos(3600 * 1000) });
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
  // The tap saw every message published into the stage (the bad one too).
  const until = Date.now() + 10000;
  while (tapped < count + 1 && Date.now() < until)
    await new Promise((r) => setTimeout(r, 50));
  console.log(`tap ${tapped} ${tappedTenant}`);
  const si = await jsm.streams.info("NODE_TAP");
  const c = await js.consumers.get("NODE_TAP");
  let delivered = 0;
  const msgs = await c.fetch({ max_messages: count + 1, expires: 3000 });
  for await (const m of msgs) {
    delivered++;
    if (delivered === count + 1) break;
  }
  console.log(`tapstream ${si.state.messages} ${delivered}`);
  tap.unsubscribe();
  await nc.close();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});

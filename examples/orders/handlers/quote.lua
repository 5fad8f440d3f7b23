-- quote: the upstream, a price per sku (a little latency, as a real one).
return function(env)
  local sku = env.payload.query.sku or ""
  local cents = 100
  for i = 1, #sku do cents = (cents * 31 + sku:byte(i)) % 10000 end
  seda.sleep(0.002)
  env.payload = ("%.2f"):format(cents / 100 + 1)
end

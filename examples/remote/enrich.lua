-- examples/remote/enrich.lua: the handler of the remote stage "enrich",
-- run by every worker process.  It prices an order and says which worker
-- did it (seda.shared is process-wide: worker.lua set "name").
return function(env)
  local o = env.payload
  o.total = o.qty * o.price
  o.worker = seda.shared:get("name")
  env.payload = o
  env.headers.priced_by = o.worker
end

-- price: ask the upstream for the unit price.  seda.http.request suspends
-- this call; the worker serves other envelopes meanwhile.
return function(env)
  local o = env.payload
  local url = seda.shared:get("quote_url") .. "?sku=" .. o.sku
  local res, err = seda.http.request{ url = url, timeout = 1 }
  if not res or res.status ~= 200 then
    return env:respond(502, { error = "quote: " .. (err or res.status) })
  end
  o.unit = tonumber(res.body)
  o.total = o.unit * o.qty
  env.payload = o
end

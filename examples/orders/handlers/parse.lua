-- parse: the order from a form body (sku=...&qty=...) or the query.
local function form(s)
  local t = {}
  for k, v in (s or ""):gmatch("([^&=]+)=([^&]*)") do
    t[k] = v:gsub("+", " "):gsub("%%(%x%x)", function(h)
      return string.char(tonumber(h, 16))
    end)
  end
  return t
end

return function(env)
  local req = env.payload
  local f = form(req.body)
  local sku = f.sku or req.query.sku
  local qty = math.tointeger(tonumber(f.qty or req.query.qty or "1"))
  if not sku or sku == "" or not qty or qty < 1 then
    return env:respond(400, { error = "give sku and a qty >= 1" })
  end
  env.payload = { sku = sku, qty = qty }
end

-- route: choose the next hop by content.
return function(env)
  local rec = env.payload
  if rec.kind == "order" then
    return env:forward("orders")
  elseif rec.kind == "alert" then
    return env:forward("alerts")
  end
  return false                           -- unknown kind: dead-letter
end

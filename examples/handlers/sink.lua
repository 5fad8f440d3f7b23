-- sink: count what arrives, per stage, in the bus-wide shared table.
return function(env)
  seda.shared:incr("sink." .. env.to)
  if env.to == "orders" then
    seda.shared:incr("revenue_cents", math.floor(env.payload.amount * 100))
  end
end

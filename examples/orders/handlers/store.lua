-- store: number the order and answer 201.
return function(env)
  local o = env.payload
  o.id = seda.shared:incr("orders", 1)
  env.payload = { status = 201, headers = { Location = "/orders/" .. o.id },
                  body = o }
end

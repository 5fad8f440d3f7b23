-- dlq: count dead letters by reason.
return function(env)
  seda.shared:incr("dead." .. (env.headers["x-dead-reason"] or "?"))
end

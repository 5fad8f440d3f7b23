-- parse: turn a raw log line "kind key=value ..." into a table.
-- A line that does not parse raises: with max_attempts = 1 it goes
-- straight to the dead-letter stage.
return function(env)
  local line = env.payload
  local kind, rest = line:match("^(%a+)%s+(.*)$")
  if not kind then
    error("unparseable line: " .. line)
  end
  local rec = { kind = kind }
  for k, v in rest:gmatch("(%w+)=(%S+)") do
    rec[k] = tonumber(v) or v
  end
  env.payload = rec
  env.headers.kind = kind
end

-- parse: turn a raw log line "kind key=value ..." into a table.
-- A line that does not parse is nacked: with max_attempts = 1 it goes
-- straight to the dead-letter stage.  The first such line of the run
-- raises, so its error is reported once with its traceback (that is what
-- a handler error looks like); the rest return false, a nack without a
-- report, and are counted in seda.shared ("parse.unparseable") for the
-- summary.
return function(env)
  local line = env.payload
  local kind, rest = line:match("^(%a+)%s+(.*)$")
  if not kind then
    if seda.shared:incr("parse.unparseable") == 1 then
      error("unparseable line: " .. line)
    end
    return false
  end
  local rec = { kind = kind }
  for k, v in rest:gmatch("(%w+)=(%S+)") do
    rec[k] = tonumber(v) or v
  end
  env.payload = rec
  env.headers.kind = kind
end

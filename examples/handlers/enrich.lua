-- enrich: add the user's region.  The directory lookup "fails" on the
-- first attempt for every 7th record, to show retries at the head of the
-- queue (max_attempts = 3 on this stage).
local regions = { alice = "eu", bob = "us", carol = "apac" }

return {
  init = function(worker)
    -- Runs once per worker state when the handler is loaded.
  end,
  handle = function(env)
    local rec = env.payload
    if rec.id and rec.id % 7 == 0 and env.attempts == 1 then
      return false                       -- nack: retried
    end
    rec.region = regions[rec.user] or "unknown"
    rec.attempts_here = env.attempts
    env.payload = rec
  end,
}

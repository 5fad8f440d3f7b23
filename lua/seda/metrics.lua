-- lua/seda/metrics.lua -- the Prometheus text exposition of every live bus
-- (format 0.0.4): what seda-lua serves at /metrics (--http), writes with
-- --metrics PATH, and returns from the REPL's metrics().  Embedded into
-- seda-lua at build time (src/cli/cli_metrics.c) and run once on the main
-- Lua state with cli.lua's module table M, into which it puts M.metrics.
--
-- Every family has HELP and TYPE lines; the latency families are
-- histograms (_bucket{le=}, _sum in seconds, _count) of every sample since
-- the stage was declared, so histogram_quantile() over rate() gives the
-- quantiles of any window and processes can be aggregated.  Every sample
-- carries bus="NAME" (the bus's stable name: its name option, or busN in
-- creation order); dead letters and drops carry a reason.

local M = ...
local seda = require "seda"
local fmt, concat = string.format, table.concat
local snapshot, stage_names = M.snapshot, M.stage_names

local function esc(v)
  return (tostring(v):gsub("[\\\"\n]", { ["\\"] = "\\\\", ['"'] = '\\"',
                                          ["\n"] = "\\n" }))
end

local function pnum(v)
  if v == true then return "1" end
  if v == false then return "0" end
  if math.type(v) == "integer" then return tostring(v) end
  if v ~= v then return "NaN" end
  if v == math.huge then return "+Inf" end
  if v == -math.huge then return "-Inf" end
  return fmt("%.9g", v)
end

local STAGE_METRICS = {
  { "depth", "gauge", "Envelopes waiting in the stage's queue.", "depth" },
  { "capacity", "gauge", "Capacity of the stage's queue.", "capacity" },
  { "concurrency", "gauge", "Concurrency limit (permits) of the stage.",
    "concurrency" },
  { "in_flight", "gauge", "Envelopes being handled by the stage now " ..
    "(a pull stage: leased, not yet settled).", "in_flight" },
  { "consumers", "gauge", "Consumers (handlers) of the stage.", "consumers" },
  { "enqueued_total", "counter", "Envelopes admitted to the stage's queue " ..
    "(retries not counted).", "enqueued" },
  { "delivered_total", "counter", "Deliveries the stage's handlers acked.",
    "delivered" },
  { "nacked_total", "counter", "Deliveries that nacked (false or an error).",
    "nacked" },
  { "errors_total", "counter", "Errors reported for the stage (handler " ..
    "errors, hop timeouts, journal failures).", "errors" },
  { "invalid_total", "counter", "Publishes and hops refused by the stage's " ..
    "type check.", "invalid" },
  { "refused_total", "counter", "Publishes refused by the stage's admit " ..
    "rule.", "refused" },
  { "shed_total", "counter", "Publishes refused by adaptive shedding.",
    "shed" },
  { "shed_for_total", "counter", "New itineraries refused at the door " ..
    "because this stage (first or on their slip) was shedding.",
    "shed_for" },
  { "shedding", "gauge", "Adaptive shedding now: 0 no, 1 refusing low " ..
    "priority, 2 low and normal.", "shedding" },
  { "delayed", "gauge", "Retries waiting out their backoff.", "delayed" },
  { "suspended", "gauge", "Handler calls suspended on a network wait " ..
    "(holding a concurrency slot, no worker).", "suspended" },
  { "completed_total", "counter", "Itineraries that completed at the " ..
    "stage (their last hop acked there).", "completed" },
  { "depth_high", "gauge", "Envelopes waiting at high priority.",
    "depth_high" },
  { "depth_low", "gauge", "Envelopes waiting at low priority.", "depth_low" },
  { "handed_off_total", "counter", "Itineraries that left this process " ..
    "here for JetStream.", "handed_off" },
  { "long_holds_total", "counter", "Handler calls that held their " ..
    "worker longer than the bus's hold_warn outside seda's waits (a " ..
    "blocking call not wrapped in seda.blocking).", "long_holds" },
  { "handler_version", "gauge", "Version of the stage's handler code " ..
    "(1 at declaration, +1 per successful reload).", "version" },
}

local BUS_METRICS = {
  { "accepted_total", "counter", "Envelopes accepted by publish.", "accepted" },
  { "completed_total", "counter", "Itineraries completed.", "completed" },
  { "dead_lettered_total", "counter", "Itineraries dead-lettered.",
    "dead_lettered" },
  { "dropped_total", "counter", "Itineraries evicted (drop_oldest) or " ..
    "swept by a shutdown.", "dropped" },
  { "handed_off_total", "counter", "Itineraries that left this process " ..
    "for JetStream (a remote stage); the process that takes them counts " ..
    "their end.", "handed_off" },
  { "in_system", "gauge", "Accepted itineraries not yet ended.", "in_system" },
  { "workers", "gauge", "Worker threads of the bus's pool.", "workers" },
  { "suspended", "gauge", "Handler calls suspended on a network wait, " ..
    "all stages.", "suspended" },
  { "workers_loaned", "gauge", "Loan threads in service now (standing in " ..
    "for workers blocked inside handlers).", "workers_loaned" },
  { "loans_total", "counter", "Loans started (a worker blocked inside a " ..
    "handler while a loan thread ran for it).", "loans" },
  { "max_loans", "gauge", "The bound on workers_loaned.", "max_loans" },
  { "waits_uncovered_total", "counter", "Waits inside handlers no loan " ..
    "covered (max_loans reached): each held its worker.",
    "waits_uncovered" },
  { "long_holds_total", "counter", "Handler calls that held their " ..
    "worker longer than hold_warn outside seda's waits, all stages.",
    "long_holds" },
  { "paused", "gauge", "1 when the bus is paused.", "paused" },
  { "callbacks_pending", "gauge", "on_complete results waiting for the " ..
    "main state.", "callbacks_pending" },
  { "quarantined_total", "counter", "Malformed journal rows the replay " ..
    "set aside.", "quarantined" },
  { "wal_discarded_frames_total", "counter", "WAL frames recovery " ..
    "dropped when the journal opened (a damaged log).",
    "wal_discarded_frames" },
  { "wal_discarded_bytes_total", "counter", "Bytes of the WAL frames " ..
    "recovery dropped when the journal opened.", "wal_discarded_bytes" },
  -- The journal's group commits (stats().journal, when it is open).
  { "journal_commits_total", "counter", "Journal transactions committed " ..
    "(groups).", function(s) return s.journal and s.journal.commits end },
  { "journal_requests_total", "counter", "Write requests those commits " ..
    "held (publishes, drain batches' decisions, single hops).",
    function(s) return s.journal and s.journal.requests end },
  { "journal_group_mean", "gauge", "Mean requests per commit since the " ..
    "journal opened.", function(s) return s.journal and s.journal.group_mean end },
  { "journal_group_max", "gauge", "Most requests one commit held.",
    function(s) return s.journal and s.journal.group_max end },
  { "journal_fsyncs_total", "counter", "fsyncs the journal's commits made " ..
    "(one per commit at sync = full; checkpoints only at normal).",
    function(s) return s.journal and s.journal.fsyncs end },
}

-- Histogram bounds, seconds.
local BOUNDS = { 0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
                 math.huge }
local DEAD_REASONS = { "max_attempts", "no_consumers", "no_such_stage",
                       "hop_refused", "type", "other" }

function M.metrics()
  local snap = snapshot()
  local lines = {}
  local function add(s) lines[#lines + 1] = s end
  local function labels(e, stage, extra)
    local l = {}
    l[#l + 1] = 'bus="' .. esc(e.stats.name or e.index) .. '"'
    if stage then l[#l + 1] = 'stage="' .. esc(stage) .. '"' end
    if extra then l[#l + 1] = extra end
    if #l == 0 then return "" end
    return "{" .. concat(l, ",") .. "}"
  end
  for _, m in ipairs(STAGE_METRICS) do
    local samples = {}
    for _, e in ipairs(snap) do
      for _, name in ipairs(stage_names(e.stats)) do
        local s = e.stats.stages[name]
        local v = s[m[4]]
        if v ~= nil then
          samples[#samples + 1] = "seda_stage_" .. m[1] .. labels(e, name) ..
                                  " " .. pnum(v)
        end
      end
    end
    if #samples > 0 then
      add("# HELP seda_stage_" .. m[1] .. " " .. m[3])
      add("# TYPE seda_stage_" .. m[1] .. " " .. m[2])
      for _, s in ipairs(samples) do add(s) end
    end
  end
  -- reload errors: 1 when the last reload of the stage failed
  add("# HELP seda_stage_reload_failed 1 when the stage's last reload failed " ..
      "(the old code stays installed).")
  add("# TYPE seda_stage_reload_failed gauge")
  for _, e in ipairs(snap) do
    for _, name in ipairs(stage_names(e.stats)) do
      add("seda_stage_reload_failed" .. labels(e, name) .. " " ..
          (e.stats.stages[name].last_error and "1" or "0"))
    end
  end
  -- Why envelopes left: dead letters and drops by reason.
  local function family(name, typ, help, rows)
    if #rows == 0 then return end
    add("# HELP " .. name .. " " .. help)
    add("# TYPE " .. name .. " " .. typ)
    for _, r in ipairs(rows) do add(r) end
  end
  local dead, dropped = {}, {}
  for _, e in ipairs(snap) do
    for _, name in ipairs(stage_names(e.stats)) do
      local s = e.stats.stages[name]
      local by = s.dead_by_reason or {}
      for _, r in ipairs(DEAD_REASONS) do
        dead[#dead + 1] = "seda_stage_dead_lettered_total" ..
          labels(e, name, 'reason="' .. r .. '"') .. " " .. pnum(by[r] or 0)
      end
      local shed, refused = s.shed or 0, s.refused or 0
      local other = (s.dropped or 0) - shed - refused
      for _, r in ipairs({ { "shed", shed }, { "refused", refused },
                           { "full", other > 0 and other or 0 } }) do
        dropped[#dropped + 1] = "seda_stage_dropped_total" ..
          labels(e, name, 'reason="' .. r[1] .. '"') .. " " .. pnum(r[2])
      end
    end
  end
  family("seda_stage_dead_lettered_total", "counter", "Envelopes " ..
    "dead-lettered by the stage, by reason (x-dead-reason).", dead)
  family("seda_stage_dropped_total", "counter", "Envelopes the stage " ..
    "refused or evicted, by reason: shed (adaptive shedding), refused (an " ..
    "admit rule), full (the policy at a full queue: rejected, dropped, " ..
    "evicted or timed out, and sweeps at shutdown).", dropped)
  -- Latency histograms since the stage was declared (never reset).
  for _, kind in ipairs({ "service", "sojourn" }) do
    local samples = {}
    local base = "seda_stage_" .. kind .. "_seconds"
    for _, e in ipairs(snap) do
      for _, name in ipairs(stage_names(e.stats)) do
        local ok, cum, count, sum = pcall(e.bus.histogram, e.bus, name, kind,
                                          BOUNDS)
        if ok and cum then
          for i, le in ipairs(BOUNDS) do
            samples[#samples + 1] = base .. "_bucket" ..
              labels(e, name, 'le="' .. (le == math.huge and "+Inf"
                                         or pnum(le)) .. '"') ..
              " " .. pnum(cum[i])
          end
          samples[#samples + 1] = base .. "_sum" .. labels(e, name) .. " " ..
                                  pnum(sum)
          samples[#samples + 1] = base .. "_count" .. labels(e, name) ..
                                  " " .. pnum(count)
        end
      end
    end
    family(base, "histogram", kind == "service"
      and "Handler run time per call, since the stage was declared."
      or "Time from admission to the stage to the start of its handler, " ..
         "since the stage was declared.", samples)
  end
  -- The newest recent error of each stage that has one (bus:errors()).
  local errs = {}
  for _, e in ipairs(snap) do
    local ok, list = pcall(e.bus.errors, e.bus)
    local seen = {}
    for _, x in ipairs(ok and list or {}) do
      if not seen[x.stage] then
        seen[x.stage] = true
        errs[#errs + 1] = "seda_stage_last_error_timestamp_seconds" ..
                          labels(e, x.stage) .. " " .. fmt("%.3f", x.time)
      end
    end
  end
  if #errs > 0 then
    add("# HELP seda_stage_last_error_timestamp_seconds Wall-clock time " ..
        "(Unix seconds) of the stage's newest error (bus:errors()).")
    add("# TYPE seda_stage_last_error_timestamp_seconds gauge")
    for _, s in ipairs(errs) do add(s) end
  end
  for _, m in ipairs(BUS_METRICS) do
    local samples = {}
    for _, e in ipairs(snap) do
      local v
      if type(m[4]) == "function" then v = m[4](e.stats) else v = e.stats[m[4]] end
      if v ~= nil then
        samples[#samples + 1] = "seda_bus_" .. m[1] .. labels(e) .. " " .. pnum(v)
      end
    end
    if #samples > 0 then
      add("# HELP seda_bus_" .. m[1] .. " " .. m[3])
      add("# TYPE seda_bus_" .. m[1] .. " " .. m[2])
      for _, s in ipairs(samples) do add(s) end
    end
  end
  -- Each worker state's Lua memory (as of its last handler call).
  local mem = {}
  for _, e in ipairs(snap) do
    for i, v in ipairs(e.stats.worker_memory or {}) do
      mem[#mem + 1] = "seda_worker_lua_memory_bytes" ..
        labels(e, nil, 'worker="' .. (i - 1) .. '"') .. " " .. pnum(v)
    end
  end
  family("seda_worker_lua_memory_bytes", "gauge", "Bytes the worker's Lua " ..
    "state holds, as of the end of its last handler call.", mem)
  -- Listeners (bus:listen): requests, responses by class, connections,
  -- the request latency as a histogram (since the listener opened) and
  -- as p50/p99 over the stats window.
  local LISTENER = {
    { "requests_total", "counter", "Whole requests handed to the bus.",
      function(l) return l.requests end },
    { "open_connections", "gauge", "Open client connections.",
      function(l) return l.open_connections end },
    { "waiting", "gauge", "Requests whose itinerary has not answered yet.",
      function(l) return l.waiting end },
    { "timeouts_total", "counter", "Requests answered 504 (timeout).",
      function(l) return l.timeouts end },
    { "slow_clients_total", "counter", "Connections cut because the " ..
      "client took longer than client_timeout.",
      function(l) return l.slow_clients end },
  }
  local lsamples = {}
  for _, m in ipairs(LISTENER) do lsamples[m[1]] = {} end
  local resp, lat, hist = {}, {}, {}
  for _, e in ipairs(snap) do
    for addr, l in pairs(e.stats.listeners or {}) do
      local lab = 'listener="' .. esc(addr) .. '"'
      for _, m in ipairs(LISTENER) do
        local t = lsamples[m[1]]
        t[#t + 1] = "seda_http_" .. m[1] .. labels(e, nil, lab) .. " " ..
                    pnum(m[4](l))
      end
      -- The classes partition the answers: 5xx is every 5xx but 503.
      for _, c in ipairs({ "1xx", "2xx", "3xx", "4xx", "503", "5xx" }) do
        resp[#resp + 1] = "seda_http_responses_total" ..
          labels(e, nil, lab .. ',class="' .. c .. '"') .. " " ..
          pnum(l.responses[c] or 0)
      end
      local h = l.latency_hist
      if h then
        for i, le in ipairs(h.le) do
          hist[#hist + 1] = "seda_http_request_seconds_bucket" ..
            labels(e, nil, lab .. ',le="' .. pnum(le) .. '"') .. " " ..
            pnum(h.cum[i])
        end
        hist[#hist + 1] = "seda_http_request_seconds_bucket" ..
          labels(e, nil, lab .. ',le="+Inf"') .. " " .. pnum(h.count)
        hist[#hist + 1] = "seda_http_request_seconds_sum" ..
          labels(e, nil, lab) .. " " .. pnum(h.sum)
        hist[#hist + 1] = "seda_http_request_seconds_count" ..
          labels(e, nil, lab) .. " " .. pnum(h.count)
      end
      for _, q in ipairs({ "p50", "p99" }) do
        lat[q] = lat[q] or {}
        lat[q][#lat[q] + 1] = "seda_http_request_" .. q .. "_seconds" ..
          labels(e, nil, lab) .. " " ..
          (l.latency_count > 0 and pnum(l["latency_" .. q]) or "NaN")
      end
    end
  end
  for _, m in ipairs(LISTENER) do
    if #lsamples[m[1]] > 0 then
      add("# HELP seda_http_" .. m[1] .. " " .. m[3])
      add("# TYPE seda_http_" .. m[1] .. " " .. m[2])
      for _, x in ipairs(lsamples[m[1]]) do add(x) end
    end
  end
  if #resp > 0 then
    add("# HELP seda_http_responses_total Responses by class: 1xx, 2xx, " ..
        "3xx, 4xx, 503 and 5xx (every 5xx but 503): each answer in one.")
    add("# TYPE seda_http_responses_total counter")
    for _, x in ipairs(resp) do add(x) end
    for _, q in ipairs({ "p50", "p99" }) do
      add("# HELP seda_http_request_" .. q .. "_seconds The " .. q ..
          " of the time from a whole request to its answer, over the " ..
          "last 10 s.")
      add("# TYPE seda_http_request_" .. q .. "_seconds gauge")
      for _, x in ipairs(lat[q]) do add(x) end
    end
    if #hist > 0 then
      add("# HELP seda_http_request_seconds Time from a whole request to " ..
          "its answer, since the listener opened.")
      add("# TYPE seda_http_request_seconds histogram")
      for _, x in ipairs(hist) do add(x) end
    end
  end
  add("# HELP seda_buses Live buses in the process.")
  add("# TYPE seda_buses gauge")
  add("seda_buses " .. #snap)
  add("# HELP seda_build_info The seda-lua build (always 1).")
  add("# TYPE seda_build_info gauge")
  add('seda_build_info{version="' .. esc(seda.version or "?") ..
      '",lua="' .. esc(_VERSION) .. '"} 1')
  local p = seda.process and seda.process() or {}
  local proc = {
    { "process_resident_memory_bytes", "gauge", "Resident memory size in " ..
      "bytes.", p.resident_memory_bytes },
    { "process_virtual_memory_bytes", "gauge", "Virtual memory size in " ..
      "bytes.", p.virtual_memory_bytes },
    { "process_cpu_seconds_total", "counter", "Total user and system CPU " ..
      "time spent in seconds.", p.cpu_seconds },
    { "process_open_fds", "gauge", "Number of open file descriptors.",
      p.open_fds },
    { "process_max_fds", "gauge", "Maximum number of open file " ..
      "descriptors.", p.max_fds },
    { "process_start_time_seconds", "gauge", "Start time of the process " ..
      "since unix epoch in seconds.", p.start_time_seconds },
  }
  for _, m in ipairs(proc) do
    if m[4] then
      local v = math.type(m[4]) == "float" and fmt("%.3f", m[4]) or pnum(m[4])
      family(m[1], m[2], m[3], { m[1] .. " " .. v })
    end
  end
  -- seda.shared (process-wide): its size against its bound, and what the
  -- bound pushed out (least recently used first) or expiry freed.
  local sh = seda.shared and seda.shared.stats and seda.shared:stats()
  if sh then
    for _, m in ipairs{
      { "seda_shared_keys", "gauge", "Entries in seda.shared.", sh.keys },
      { "seda_shared_bytes", "gauge", "Bytes seda.shared holds (keys, " ..
        "values and a fixed cost per entry).", sh.bytes },
      { "seda_shared_capacity_bytes", "gauge", "The bound on " ..
        "seda.shared's bytes (seda.shared:capacity()).", sh.capacity },
      { "seda_shared_evicted_total", "counter", "Live seda.shared " ..
        "entries evicted, least recently used first, to make room.",
        sh.evicted },
      { "seda_shared_expired_total", "counter", "Expired seda.shared " ..
        "entries freed.", sh.expired },
    } do
      family(m[1], m[2], m[3], { m[1] .. " " .. pnum(m[4]) })
    end
  end
  return concat(lines, "\n") .. "\n"
end

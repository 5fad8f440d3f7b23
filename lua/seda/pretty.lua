-- lua/seda/pretty.lua -- how the seda-lua REPL shows a value: embedded
-- into seda-lua with cli.lua (src/cli/cli_lua.c) and handed to it as its
-- second argument.  Returns { pretty = function(v) -> text }.
--
-- Like the REPLs of lua5.4-based tools: a table prints as indented
-- `key = value` lines (the array part first, then the other keys in
-- order; records with an `index` field, such as stages, in that order),
-- short ones on one line; nesting deeper than PP_DEPTH, more than
-- PP_ITEMS entries and more than PP_LINES lines are cut (and say so); a
-- table inside itself prints as <cycle: PATH>.  A top-level string
-- prints raw, as print would; values with __tostring print through it.

local fmt, concat, sort = string.format, table.concat, table.sort

local PP_DEPTH, PP_ITEMS, PP_LINES, PP_WIDTH, PP_STR = 5, 100, 400, 72, 200

local function pp_str(s)
  local cut = #s > PP_STR
  local q = fmt("%q", cut and s:sub(1, PP_STR) or s):gsub("\\\n", "\\n")
  if cut then q = q .. fmt(" --[[%d bytes]]", #s) end
  return q
end

local function pp_key(k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") then return k end
  if type(k) == "string" then return "[" .. pp_str(k) .. "]" end
  return "[" .. tostring(k) .. "]"
end

local TYPE_RANK = { number = 1, string = 2, boolean = 3 }

local function key_order(t, keys)
  local recs = #keys > 0
  for _, k in ipairs(keys) do
    local v = rawget(t, k)
    if type(v) ~= "table" or math.type(rawget(v, "index")) ~= "integer" then
      recs = false
      break
    end
  end
  sort(keys, function(a, b)
    if recs then
      local ia, ib = rawget(t, a).index, rawget(t, b).index
      if ia ~= ib then return ia < ib end
    end
    local ta, tb = TYPE_RANK[type(a)] or 4, TYPE_RANK[type(b)] or 4
    if ta ~= tb then return ta < tb end
    if ta <= 2 then return a < b end
    return tostring(a) < tostring(b)
  end)
end

local function has_tostring(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__tostring") ~= nil
end

-- The entries of table v in print order: { {key or nil, value}, ... }
-- (the array part first, keyless).
local function entries(v)
  local n = #v
  local keys = {}
  for k in next, v do
    if not (math.type(k) == "integer" and k >= 1 and k <= n) then
      keys[#keys + 1] = k
    end
  end
  key_order(v, keys)
  local items = {}
  for i = 1, n do items[#items + 1] = { nil, rawget(v, i) } end
  for _, k in ipairs(keys) do items[#items + 1] = { k, rawget(v, k) } end
  return items
end

-- seda.null (cjson.null): the NULL light userdata, JSON's null in payloads.
local null = (package.loaded.seda or {}).null

local function scalar(v)
  if type(v) == "string" then return pp_str(v) end
  if v ~= nil and v == null then return "seda.null" end
  local ok, s = pcall(tostring, v)
  return ok and s or "<tostring failed>"
end

-- v on one line if it fits in `room` characters (tables nested inside
-- included, at most 3 deep, no cycles), else nil.
local function inline(v, room, open, depth)
  if type(v) ~= "table" or has_tostring(v) then
    local s = scalar(v)
    return #s <= room and s or nil
  end
  if open[v] or depth > 3 then return nil end
  local count = 0
  for _ in next, v do                  -- a long table never fits: no sort
    count = count + 1
    if count > room // 3 then return nil end
  end
  local items = entries(v)
  if #items == 0 then return room >= 2 and "{}" or nil end
  open[v] = true
  local parts, used = {}, 4
  for _, it in ipairs(items) do
    local key = it[1] ~= nil and (pp_key(it[1]) .. " = ") or ""
    local s = inline(it[2], room - used - #key, open, depth + 1)
    if not s then open[v] = nil; return nil end
    parts[#parts + 1] = key .. s
    used = used + #key + #s + 2
    if used > room then open[v] = nil; return nil end
  end
  open[v] = nil
  return "{ " .. concat(parts, ", ") .. " }"
end

-- Render v into the list `out` (lines); `lead` starts the first line,
-- `ind` is the indent of the lines after it.
local function pp(v, out, lead, ind, path, open, depth)
  if type(v) ~= "table" or has_tostring(v) then
    out[#out + 1] = lead .. scalar(v)
    return
  end
  if open[v] then
    out[#out + 1] = lead .. "<cycle: " .. open[v] .. ">"
    return
  end
  if depth >= PP_DEPTH then
    local n = 0
    for _ in next, v do n = n + 1 end
    out[#out + 1] = lead .. (n == 0 and "{}" or fmt("{ --[[%d entr%s]] }",
                             n, n == 1 and "y" or "ies"))
    return
  end
  -- One line when it fits.
  local one = inline(v, PP_WIDTH - #lead, {}, 0)
  if one then
    out[#out + 1] = lead .. one
    return
  end
  local items = entries(v)
  open[v] = path == "" and "the top" or path
  out[#out + 1] = lead .. "{"
  local inner = ind .. "  "
  for i, it in ipairs(items) do
    if i > PP_ITEMS then
      out[#out + 1] = inner .. fmt("--[[ %d more ]]", #items - PP_ITEMS)
      break
    end
    if #out > PP_LINES then break end
    local k = it[1]
    local kp = k == nil and fmt("[%d]", i) or
               (type(k) == "string" and k:match("^[%a_][%w_]*$") and
                "." .. k or "[" .. (type(k) == "string" and pp_str(k) or
                                     tostring(k)) .. "]")
    pp(it[2], out, inner .. (k ~= nil and (pp_key(k) .. " = ") or ""), inner,
       path .. kp, open, depth + 1)
    out[#out] = out[#out] .. ","
  end
  out[#out + 1] = ind .. "}"
  open[v] = nil
end

-- The text a REPL shows for value v (no trailing newline).
local function pretty(v)
  if type(v) == "string" then return v end
  local out = {}
  pp(v, out, "", "", "", {}, 0)
  if #out > PP_LINES then
    local more = #out - PP_LINES
    for i = #out, PP_LINES + 1, -1 do out[i] = nil end
    out[#out + 1] = fmt("--[[ output cut: %d more lines ]]", more)
  end
  return concat(out, "\n")
end

return { pretty = pretty }

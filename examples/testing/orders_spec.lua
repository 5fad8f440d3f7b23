-- examples/testing/orders_spec.lua: the HTTP handlers of
-- examples/orders/service.lua under busted, with seda.test: env:respond's
-- answers and the quote upstream stubbed with T.stub_http.  docs/testing.md
-- explains it; `make test` runs it (tests/cli/test_busted.sh).
local T = require "seda.test"
local seda = require "seda"

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local H = here .. "../orders/handlers/"

local function request(query)
  return { method = "GET", path = "/orders", query = query, headers = {} }
end

describe("parse", function()
  it("answers 400 at once when the order is incomplete", function()
    local r = T.call(H .. "parse.lua", request{ sku = "book", qty = "0" },
                     { slip = { "price", "store" } })
    assert.is_true(r.ok)
    assert.same({ status = 400, body = { error = "give sku and a qty >= 1" } },
                r.response)
    assert.is_nil(r.next)                         -- price and store skipped
  end)

  it("passes a good order on", function()
    local r = T.call(H .. "parse.lua", request{ sku = "book", qty = "2" },
                     { slip = { "price", "store" } })
    assert.is_nil(r.response)
    assert.same({ sku = "book", qty = 2 }, r.payload)
    assert.equal("price", r.next)
  end)
end)

describe("price", function()
  local stub
  before_each(function()
    seda.shared:set("quote_url", "http://quote.test/quote")
  end)
  after_each(function() stub.restore() end)

  it("prices the order from the upstream's quote", function()
    stub = T.stub_http{ ["GET http://quote.test/quote"] = "4.25" }
    local r = T.call(H .. "price.lua", { sku = "book", qty = 2 })
    assert.is_true(r.ok)
    assert.equal(8.5, r.payload.total)
    assert.equal("http://quote.test/quote?sku=book", stub.requests[1].url)
  end)

  it("answers 502 when the upstream fails", function()
    stub = T.stub_http(function(req)
      return nil, "timeout: GET " .. req.url .. " (after 1 s)"
    end)
    local r = T.call(H .. "price.lua", { sku = "book", qty = 2 })
    assert.equal(502, r.response.status)
    assert.matches("^quote: timeout", r.response.body.error)
  end)
end)

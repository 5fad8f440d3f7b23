-- GET /: a form that places an order (GET /orders?sku=&qty=).
local PAGE = [[<!doctype html>
<html><head><meta charset="utf-8"><title>orders</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: 2em auto">
<h1>orders</h1>
<p>Each order goes through <b>parse</b> &rarr; <b>price</b> (which asks an
upstream for a quote) &rarr; <b>store</b>, and the answer comes back.</p>
<form action="/orders" method="get">
  <label>sku <input name="sku" value="book"></label>
  <label>qty <input name="qty" value="2" size="3"></label>
  <button>order</button>
</form>
<p><a href="/health">/health</a></p>
</body></html>
]]
return function(env)
  env.payload = { status = 200, headers = { ["Content-Type"] = "text/html; charset=utf-8" },
                  body = PAGE }
end

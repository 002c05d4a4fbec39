-- wrk script for the proxy's load test (scripts/proxy-load): POST /payments with a JSON body, to
-- the proxy or to the upstream directly.
-- Usage: wrk -s benches/proxy/payments.lua ... -- <new|replay> <run id>
--   new:    every request a new Idempotency-Key (each one runs the payment at the upstream)
--   replay: each connection repeats one key (its first request runs, every later one replays)
local threads = 0

function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end

function init(args)
  mode = args[1] or "new"
  run = args[2] or "run"
  sent = 0
end

function request()
  sent = sent + 1
  local n = sent
  if mode == "replay" then
    n = 0
  end
  local key = run .. "-t" .. tid .. "-" .. n
  local headers = {
    ["Idempotency-Key"] = key,
    ["Content-Type"] = "application/json",
  }
  local body = '{"account": "acct-' .. tid .. '", "amount": ' .. (100 + n) .. '}'
  return wrk.format("POST", "/payments", headers, body)
end

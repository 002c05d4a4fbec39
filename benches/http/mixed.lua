-- wrk script for the HTTP layer's load test: POST /payments with an Idempotency-Key, mixing new
-- keys with retries of keys this connection already sent (same body, so they replay).
-- Usage: wrk -s benches/http/mixed.lua ... -- <retry percent, default 20> <run id>
local threads = 0

function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end

function init(args)
  retry_pct = tonumber(args[1] or "20")
  run = args[2] or "run"
  sent = 0
  math.randomseed(tid * 7919 + 17)
end

function request()
  local n
  if sent > 0 and math.random(100) <= retry_pct then
    n = math.random(sent)
  else
    sent = sent + 1
    n = sent
  end
  local key = '"' .. run .. "-t" .. tid .. "-" .. n .. '"'
  local headers = {
    ["Authorization"] = "Bearer load" .. tid,
    ["Idempotency-Key"] = key,
    ["Content-Type"] = "text/plain",
  }
  return wrk.format("POST", "/payments", headers, tostring(100 + n))
end

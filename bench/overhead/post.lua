-- wrk script: POST $BODY to $URL_PATH with a bearer key (and Anthropic's headers for /v1/messages).
-- Prints one JSONRESULT line: requests, duration, rate, non-200 count.
wrk.method = "POST"
wrk.path = os.getenv("URL_PATH") or "/v1/chat/completions"
wrk.body = os.getenv("BODY")
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("API_KEY") or "sk-bench")
if wrk.path == "/v1/messages" then
  wrk.headers["anthropic-version"] = "2023-06-01"
end

local bad = 0
response = function(status, headers, body)
  if status ~= 200 then bad = bad + 1 end
end

done = function(summary, latency, requests)
  local secs = summary.duration / 1e6
  io.write(string.format('JSONRESULT {"requests":%d,"duration_s":%.3f,"rps":%.1f,' ..
    '"lat_p50_ms":%.3f,"lat_p99_ms":%.3f,"non_200":%d}\n', summary.requests, secs,
    summary.requests / secs, latency:percentile(50) / 1000, latency:percentile(99) / 1000, bad))
end

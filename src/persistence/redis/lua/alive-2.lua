--[[
  Lists the nodes whose heartbeat has not expired (Redis server clock). Read only.

  Input:
    KEYS[1] node expiry sorted set (keys.nodes)
    KEYS[2] node info hash         (keys.nodeInfos)

  Output:
    array of JSON NodeInfo strings, in node id order (ties of the sorted set are not relied on:
    the caller sorts).
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
local out = {}
for i = 1, #ids do
  local info = redis.call('HGET', KEYS[2], ids[i])
  if info then
    out[#out + 1] = info
  end
end
return out

--[[
  Registers or refreshes a node in the registry and drops nodes whose heartbeat expired. Expiry
  uses the Redis server clock (TIME), so nodes with skewed clocks agree on who is alive.

  Input:
    KEYS[1] node expiry sorted set (keys.nodes), member node id, score expiry ms
    KEYS[2] node info hash         (keys.nodeInfos), field node id, value JSON NodeInfo
    ARGV[1] node id
    ARGV[2] ttl in ms
    ARGV[3] JSON NodeInfo

  Output:
    the expiry in ms (server clock).
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 1, #expired do
  redis.call('HDEL', KEYS[2], expired[i])
end
if #expired > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
end
local expiry = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], expiry, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return expiry

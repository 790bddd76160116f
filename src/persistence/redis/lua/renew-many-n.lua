--[[
  Extends several partition leases in one call, each only if it is still held by exactly the
  given node and epoch (pexpire-if-equal-1.lua for many partitions: one command per renewal round
  instead of one per partition).

  Input (numkeys = n):
    KEYS[i]   partition lease (keys.partitionLease)
    ARGV[1]   ttl in ms
    ARGV[i+1] "<nodeId>:<epoch>" expected in KEYS[i]

  Output:
    an array of n integers: 1 where extended, 0 where the lease was lost (expired, released or
    taken by another epoch).
]]
local out = {}
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i + 1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out

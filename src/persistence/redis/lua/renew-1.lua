--[[
  Extends a partition lease if it is still held by exactly this node and epoch.

  Input:
    KEYS[1] partition lease (keys.partitionLease)
    ARGV[1] "<nodeId>:<epoch>"
    ARGV[2] ttl in ms

  Output:
    1 when extended, 0 when the lease was lost (expired, released or taken by another epoch).
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0

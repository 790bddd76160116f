--[[
  Gives a partition lease up at once, but only if still held by exactly this node and epoch (a
  late release must never free a lease that another node has acquired since).

  Input:
    KEYS[1] partition lease (keys.partitionLease)
    ARGV[1] "<nodeId>:<epoch>"

  Output:
    1 when released, 0 when the lease was no longer ours.
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0

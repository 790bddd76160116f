--[[
  Takes a partition lease when it is free (never taken, released or expired) or already held by
  the same node (a restarted node takes its partitions back without waiting for the ttl). Every
  success INCRs the epoch counter, which is never reset, so epochs strictly increase per partition.

  Input:
    KEYS[1] partition lease         (keys.partitionLease)
    KEYS[2] partition epoch counter (keys.partitionEpoch)
    ARGV[1] node id
    ARGV[2] ttl in ms

  Output:
    the new epoch (integer), or nil when another node holds a live lease.
]]
local holder = redis.call('GET', KEYS[1])
if holder then
  local node = string.match(holder, '^(.*):%d+$')
  if node ~= ARGV[1] then
    return false
  end
end
local epoch = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. epoch, 'PX', ARGV[2])
return epoch

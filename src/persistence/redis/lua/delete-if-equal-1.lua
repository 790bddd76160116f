--[[
  Deletes a key only while it still holds the given value: how a partition lease ("<nodeId>:<epoch>")
  and a named lock (its acquisition's token) are given up. After a ttl ran out another holder may
  have taken the key with its own value, and a late release must never free that.

  Input:
    KEYS[1] the lease or lock (keys.partitionLease, keys.lock)
    ARGV[1] the value this holder set

  Output:
    1 when deleted, 0 when the key held something else (or nothing).
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0

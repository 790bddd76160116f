--[[
  Resets a key's ttl only while it still holds the given value: how a partition lease
  ("<nodeId>:<epoch>") is renewed and a named lock (its acquisition's token) extended. After a ttl
  ran out another holder may have taken the key with its own value, and a late renewal must never
  keep that alive.

  Input:
    KEYS[1] the lease or lock (keys.partitionLease, keys.lock)
    ARGV[1] the value this holder set
    ARGV[2] ttl in ms

  Output:
    1 when extended, 0 when the key held something else (or nothing: expired or released).
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0

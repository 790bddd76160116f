--[[
  Frees a named lock (Locks), but only if this token still holds it: after the ttl ran out another
  node may hold it under its own token, and a late release must never free that.

  Input:
    KEYS[1] the lock (keys.lock)
    ARGV[1] token of the acquisition being released

  Output:
    1 when released, 0 when the lock was no longer ours.
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0

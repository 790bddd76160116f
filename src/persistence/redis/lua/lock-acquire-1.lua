--[[
  Takes a named lock (Locks) when it is free or expired: SET NX with a PX ttl. A script, not a bare
  SET, only so that both lock commands live beside the other scripts with one header each.

  Input:
    KEYS[1] the lock (keys.lock)
    ARGV[1] token of this acquisition (unique)
    ARGV[2] ttl in ms

  Output:
    1 when taken, 0 while another token holds it.
]]
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0

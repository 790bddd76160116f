--[[
  Claims client event ids (EventIds): per item, binds the id's field in its bucket hash to the
  content fingerprint unless the field exists (HSETNX), and reports the items whose id was already
  bound to another fingerprint. Items run in order, so a repeated id later in one call sees the
  earlier item's fingerprint. The items travel packed in one string (one argument instead of three
  per item); each bucket key is KEYS[1] followed by the item's two bucket bytes, so every key of a
  call shares KEYS[1]'s hash tag (one Redis Cluster slot per environment).

  Input:
    KEYS[1]  the environment's bucket key prefix (keys.eventIds without the bucket)
    ARGV[1]  items of 26 bytes: bucket (2) | field (16: the id's hashes) | fingerprint (8)

  Output:
    a flat array: item number (1-based), fingerprint bound (8 bytes), for each item whose id is
    bound to a fingerprint other than its own; empty when every item matched.
]]
local items = ARGV[1]
local out = {}
local n = 0
for o = 1, #items, 26 do
  local key = KEYS[1] .. string.sub(items, o, o + 1)
  local field = string.sub(items, o + 2, o + 17)
  local fp = string.sub(items, o + 18, o + 25)
  if redis.call('HSETNX', key, field, fp) == 0 then
    local bound = redis.call('HGET', key, field)
    if bound ~= fp then
      out[n + 1] = (o - 1) / 26 + 1
      out[n + 2] = bound
      n = n + 2
    end
  end
end
return out

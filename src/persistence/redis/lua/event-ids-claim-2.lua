--[[
  Claims client event ids (EventIds): per item, binds the id's field in its bucket hash to the
  content fingerprint unless the field exists (HSETNX), and reports the items whose id was already
  bound to another fingerprint, and the items whose id was bound to their own fingerprint before
  this call and whose event was erased (event-ids-erase-1.lua). Items run in order, so a repeated
  id later in one call sees the earlier item's fingerprint; an id bound by this call is never
  reported erased (as in the SQL adapter, whose claim is one statement), and a new id costs no
  look-up of erased events. The items travel packed in one string (one argument instead of three
  per item); each bucket key is KEYS[1] or KEYS[2] followed by the item's two bucket bytes, so
  every key of a call shares KEYS[1]'s hash tag (one Redis Cluster slot per environment).

  Input:
    KEYS[1]  the environment's bucket key prefix (keys.eventIds without the bucket)
    KEYS[2]  the environment's erased bucket key prefix (keys.erasedEventIds without the bucket)
    ARGV[1]  items of 26 bytes: bucket (2) | field (16: the id's hashes) | fingerprint (8)

  Output:
    a flat array of pairs: item number (1-based) and the fingerprint bound (8 bytes), for each item
    whose id is bound to a fingerprint other than its own; minus the item number and the erased
    event's service id, for each item answered erased; empty when every item matched.
]]
local items = ARGV[1]
local out = {}
local n = 0
local fresh = {}
for o = 1, #items, 26 do
  local bucket = string.sub(items, o, o + 1)
  local key = KEYS[1] .. bucket
  local field = string.sub(items, o + 2, o + 17)
  local fp = string.sub(items, o + 18, o + 25)
  if redis.call('HSETNX', key, field, fp) == 1 then
    fresh[field] = true
  else
    local bound = redis.call('HGET', key, field)
    if bound ~= fp then
      out[n + 1] = (o - 1) / 26 + 1
      out[n + 2] = bound
      n = n + 2
    elseif not fresh[field] then
      -- The erased field: the id's first hash (the first 8 bytes of its field) and the fingerprint.
      local erased = redis.call('HGET', KEYS[2] .. bucket, string.sub(items, o + 2, o + 9) .. fp)
      if erased then
        out[n + 1] = -((o - 1) / 26 + 1)
        out[n + 2] = erased
        n = n + 2
      end
    end
  end
end
return out

--[[
  Claims client event ids (EventIds): per item, binds the id's field in its bucket hash to the
  content fingerprint unless the field exists, and answers the fingerprint bound now. Items run in
  order, so a repeated id later in one call sees the earlier item's fingerprint.

  Input:
    KEYS[i]       item i's bucket hash (keys.eventIds)
    ARGV[2i - 1]  item i's field (the id's hash within the bucket)
    ARGV[2i]      item i's fingerprint

  Output:
    one fingerprint string per item.
]]
local out = {}
for i = 1, #KEYS do
  local field = ARGV[2 * i - 1]
  local bound = redis.call('HGET', KEYS[i], field)
  if not bound then
    bound = ARGV[2 * i]
    redis.call('HSET', KEYS[i], field, bound)
  end
  out[i] = bound
end
return out

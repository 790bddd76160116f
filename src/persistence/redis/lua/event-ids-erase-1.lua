--[[
  Remembers erased events (EventIds.erase): per item, sets the field hash53(id) | fingerprint of
  the item's erased bucket to the event's service id unless it is set (HSETNX: idempotent, the
  first id written stays). The claim script reads these fields for ids bound before its call.

  Input:
    KEYS[1]    the environment's erased bucket key prefix (keys.erasedEventIds without the bucket)
    ARGV[1]    items of 18 bytes: bucket (2) | field (16: hash53 of the id (8) | fingerprint (8))
    ARGV[2..]  the items' service event ids, in item order

  Output:
    the number of fields newly set.
]]
local items = ARGV[1]
local set = 0
for o = 1, #items, 18 do
  local i = (o - 1) / 18 + 2
  set = set + redis.call('HSETNX', KEYS[1] .. string.sub(items, o, o + 1), string.sub(items, o + 2, o + 17), ARGV[i])
end
return set

--[[
  Group commit across partitions: appends one journal entry to each of several partition streams
  in one call, each only if the caller still holds that partition's lease with the given epoch
  (fencing, checked atomically with its XADD). A fenced partition gets no entry; the others do.

  Input (numkeys = 2 * n):
    KEYS[2i-1] partition stream   (keys.partitionStream)
    KEYS[2i]   partition lease    (keys.partitionLease), value "<nodeId>:<epoch>"
    ARGV[2i-1] epoch (decimal string)
    ARGV[2i]   payload (binary)

  Output:
    an array of n strings: the new entry id ("<ms>-<seq>"), or "" for a fenced partition.
]]
local out = {}
for i = 1, #KEYS / 2 do
  local lease = redis.call('GET', KEYS[2 * i])
  local epoch = lease and string.match(lease, ':(%d+)$')
  if epoch ~= ARGV[2 * i - 1] then
    out[i] = ''
  else
    out[i] = redis.call('XADD', KEYS[2 * i - 1], '*', 'd', ARGV[2 * i])
  end
end
return out

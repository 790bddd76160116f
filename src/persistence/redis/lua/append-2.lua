--[[
  Appends one journal entry to a partition's stream if, and only if, the caller still holds the
  partition lease with the given epoch (fencing). The check and the XADD are one atomic step, so a
  node that lost its lease can never add an entry after another node acquired the partition.

  Input:
    KEYS[1] partition stream        (keys.partitionStream)
    KEYS[2] partition lease         (keys.partitionLease), value "<nodeId>:<epoch>"
    ARGV[1] epoch (decimal string)
    ARGV[2] payload (binary)

  Output:
    the new entry id ("<ms>-<seq>"), or the error "FENCED" when the lease is missing, expired or
    held under another epoch (nothing is appended).
]]
local lease = redis.call('GET', KEYS[2])
if not lease then
  return redis.error_reply('FENCED lease epoch is not current')
end
local epoch = string.match(lease, ':(%d+)$')
if epoch ~= ARGV[1] then
  return redis.error_reply('FENCED lease epoch is not current')
end
return redis.call('XADD', KEYS[1], '*', 'd', ARGV[2])

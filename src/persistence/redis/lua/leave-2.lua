--[[
  Removes a node from the registry at once (graceful shutdown).

  Input:
    KEYS[1] node expiry sorted set (keys.nodes)
    KEYS[2] node info hash         (keys.nodeInfos)
    ARGV[1] node id

  Output:
    1 when the node was registered, 0 otherwise.
]]
redis.call('HDEL', KEYS[2], ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[1])

-- rankflow: writes the rate-check states of a batch (docs/checks.md) by
-- compare-and-set. The consumer read each state, decided its events from
-- it and sends the state it read with the one to store: a state that
-- another consumer changed meanwhile is left alone and reported, and the
-- consumer reads it again and decides those events anew.
--
-- KEYS: the states; ARGV: per key the state read ("" when there was
-- none), the state to store, and its time to live in ms.
-- Reply: the (1-based) indices of the keys that had changed.

-- One call per key in the common case. A state read as absent is created
-- with SET ... NX (nothing to fetch back: half the cost in Redis); any
-- other is set and the one it replaced returned (SET ... GET); if that
-- was not the state read, it is put back (the script is atomic: nobody
-- sees the swap).
local changed = {}
for i = 1, #KEYS do
  local read, new, ttl = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  if read == "" then
    if not redis.call("SET", KEYS[i], new, "NX", "PX", ttl) then
      changed[#changed + 1] = i
    end
  else
    local was = redis.call("SET", KEYS[i], new, "PX", ttl, "GET") or ""
    if was ~= read then
      if was == "" then
        redis.call("DEL", KEYS[i])
      else
        redis.call("SET", KEYS[i], was, "PX", ttl)
      end
      changed[#changed + 1] = i
    end
  end
end
return changed

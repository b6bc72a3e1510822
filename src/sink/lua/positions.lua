-- rankflow: record partition positions after a batch was acknowledged.
-- Sent as EVALSHA on purpose: a Redis that restarted (and may have lost the
-- batch) has no scripts and answers NOSCRIPT instead of taking positions
-- that would claim the lost batch (see src/sink/positions.rs).
--
-- KEYS[1]  positions hash; ARGV  field, next offset, field, next offset, ...
-- or ARGV  "raise", field, next offset, ...: a position is only raised (a
-- shadow's backfill positions, which its backfill and the live consumers
-- both write; a field is "<topic>/<partition>", never "raise").
if ARGV[1] == "raise" then
  for i = 2, #ARGV, 2 do
    local was = tonumber(redis.call("HGET", KEYS[1], ARGV[i]))
    if not was or was < tonumber(ARGV[i + 1]) then
      redis.call("HSET", KEYS[1], ARGV[i], ARGV[i + 1])
    end
  end
  return (#ARGV - 1) / 2
end
redis.call("HSET", KEYS[1], unpack(ARGV))
return #ARGV / 2

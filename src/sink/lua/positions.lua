-- rankflow: record partition positions after a batch was acknowledged.
-- Sent as EVALSHA on purpose: a Redis that restarted (and may have lost the
-- batch) has no scripts and answers NOSCRIPT instead of taking positions
-- that would claim the lost batch (see src/sink/positions.rs).
--
-- KEYS[1]  positions hash; ARGV  field, next offset, field, next offset, ...
redis.call("HSET", KEYS[1], unpack(ARGV))
return #ARGV / 2

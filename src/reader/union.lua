-- rankflow union script (docs/http-api.md): a `last:<N><unit>` view, or a union of
-- scopes, computed at read time from the boards it covers, into a result key
-- that lives `[http] union_cache`. On a Redis Cluster every key is in one
-- slot (the instance's, or the board's for a board kept in one slot).
--
-- KEYS[1]  the result sorted set; KEYS[2] its time hash (tie-break boards:
--          member -> tie time, what the read script's HGET finds);
--          KEYS[3] its freshness marker
-- KEYS[4..] the boards: periods newest first, scope by scope (missing ones
--          count as empty; at least one)
-- ARGV[1]  aggregate: "sum" | "max" | "min"
-- ARGV[2]  tie code: "n" (no tie key), "a" (key = time), "d" (key = 2^48-1-time)
-- ARGV[3]  how long the result lives (union_cache), ms
-- ARGV[4]  how long its freshness marker lives, ms (a little less)
--
-- Reply: 0 when the result was fresh (nothing was computed), else 1 + the
-- number of members of the new result.
--
-- The result lives union_cache, no longer (a read leaves nothing behind
-- for longer than that), and the marker a little less: a reader told
-- "fresh" just before the marker expires still finds the result when it
-- reads it a moment later, instead of an empty board.

local dst, times, fresh = KEYS[1], KEYS[2], KEYS[3]
local agg, tie, ttl, marker = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

-- A fresh result is the answer: no second computation while it lasts.
if redis.call("EXISTS", fresh) == 1 then return 0 end
-- A stale one (in its grace) is replaced whole, never added to.
redis.call("UNLINK", dst, times)

local function keep(n)
  if n > 0 then
    redis.call("PEXPIRE", dst, ttl)
    if tie ~= "n" then redis.call("PEXPIRE", times, ttl) end
    redis.call("SET", fresh, "1", "PX", marker)
  end
end

local sources = {}
for i = 4, #KEYS do sources[#sources + 1] = KEYS[i] end
-- `scope=*` of a view no scope has written to yet: an empty board.
if #sources == 0 then return 1 end

if tie == "n" then
  -- Plain boards: members are stored as themselves, Redis does it all. A
  -- union of many scopes has thousands of sources, more than unpack() can
  -- pass at once: they go in chunks, each folded into the result so far
  -- (sum, max and min are all associative).
  local CHUNK_KEYS = 1000
  local n = 0
  local first = true
  local i = 1
  repeat
    local args = { dst, 0 }
    if not first then args[#args + 1] = dst end
    for j = i, math.min(i + CHUNK_KEYS - 1, #sources) do args[#args + 1] = sources[j] end
    args[2] = #args - 2
    args[#args + 1] = "AGGREGATE"
    args[#args + 1] = string.upper(agg)
    n = redis.call("ZUNIONSTORE", unpack(args))
    first = false
    i = i + CHUNK_KEYS
  until i > #sources
  keep(n)
  return 1 + n
end

-- Tie-break boards: each period stores a member behind its own 12-hex tie
-- key, so ZUNIONSTORE would keep one entry per period. Decode, aggregate per
-- member, and re-encode with the union's tie time:
--   sum      the latest tie time among the member's periods (when its
--            total last changed, as a period board's tie time is);
--   max/min  the tie time of the winning value, the earliest one when
--            several periods hold that same value.
local MAXT = 281474976710655
local score, at, order = {}, {}, {}
for _, key in ipairs(sources) do
  local rows = redis.call("ZRANGE", key, 0, -1, "WITHSCORES")
  for i = 1, #rows, 2 do
    local stored = rows[i]
    local k = tonumber(string.sub(stored, 1, 12), 16)
    local m = string.sub(stored, 13)
    local x = tonumber(rows[i + 1])
    local t = k
    if tie == "d" then t = MAXT - k end
    local s = score[m]
    if s == nil then
      score[m], at[m] = x, t
      order[#order + 1] = m
    elseif agg == "sum" then
      score[m] = s + x
      if t > at[m] then at[m] = t end
    elseif (agg == "max" and x > s) or (agg == "min" and x < s) then
      score[m], at[m] = x, t
    elseif x == s and t < at[m] then
      at[m] = t
    end
  end
end

-- Written in chunks: unpack() of a whole large board would overflow Lua's
-- stack.
local CHUNK = 500
local zargs, hargs = {}, {}
local function flush()
  if #zargs > 0 then
    redis.call("ZADD", dst, unpack(zargs))
    redis.call("HSET", times, unpack(hargs))
    zargs, hargs = {}, {}
  end
end
for _, m in ipairs(order) do
  local t = at[m]
  local k = t
  if tie == "d" then k = MAXT - t end
  zargs[#zargs + 1] = string.format("%.17g", score[m])
  zargs[#zargs + 1] = string.format("%012x", k) .. m
  hargs[#hargs + 1] = m
  hargs[#hargs + 1] = string.format("%.0f", t)
  if #zargs >= 2 * CHUNK then flush() end
end
flush()
keep(#order)
return 1 + #order

-- rankflow read script (SPEC §8.4): what a sorted set alone can say about
-- rank styles, read in one round trip and one atomic look.
--
-- KEYS[1]  the view's sorted set; KEYS[2] its K:t hash (members mode only)
-- ARGV[1]  mode: "range" | "members" | "walk"
-- ARGV[2]  order: "desc" | "asc"
-- ARGV[3]  style: "ordinal" | "competition" | "dense"
-- ARGV[4]  budget: most dense steps (one ZRANGE ... LIMIT 0 1 each) in this call
-- range:   ARGV[5] start, ARGV[6] stop (0-based ranks, inclusive)
-- members: ARGV[5] tie code ("n", "a", "d"), ARGV[6..] member ids
-- walk:    ARGV[5] count so far, ARGV[6] bound so far ("" = none),
--          ARGV[7..] target scores, best first (a continuation of "dense")
--
-- Reply: { total, rows, targets, counts, resume }
--   total    ZCARD of the view (0: the key does not exist)
--   rows     range: { stored, score, ... } as ZREVRANGE/ZRANGE WITHSCORES;
--            members: { index, rank, score, ... } (index into the ids, 1-based;
--            rank 0-based) for each id on the board
--   targets  the distinct scores the counts are for, best first
--   counts   per target: competition, members with a strictly better score;
--            dense, distinct scores strictly better; empty for ordinal
--   resume   {} when every target is counted, else { count, bound }: the
--            dense walk ran out of budget after #counts targets
--
-- Only commands of rankflow's ACL are called (ZCARD, ZRANGE, ZREVRANGE,
-- ZRANK, ZREVRANK, ZSCORE, HGET): "how many are better" is the rank of the
-- first member holding the score, found with ZRANGE ... BYSCORE LIMIT 0 1,
-- which costs the same O(log n) as ZCOUNT would.

local key = KEYS[1]
local mode, order, style = ARGV[1], ARGV[2], ARGV[3]
local budget = tonumber(ARGV[4])
local desc = order == "desc"
local MAXT = 281474976710655 -- 2^48 - 1: tie keys are 12 hex digits

-- Members strictly better than score s (s is held by some member).
local function better(s)
  local first
  if desc then
    first = redis.call("ZRANGE", key, s, "-inf", "BYSCORE", "REV", "LIMIT", 0, 1)
  else
    first = redis.call("ZRANGE", key, s, "+inf", "BYSCORE", "LIMIT", 0, 1)
  end
  if #first == 0 then return 0 end
  if desc then return redis.call("ZREVRANK", key, first[1]) end
  return redis.call("ZRANK", key, first[1])
end

-- Distinct scores strictly better than each target (best first), walking
-- from the best end one distinct score at a time: O(d log n) for d distinct
-- better scores. Stops after `budget` steps with where it got to.
local function walk(targets, d, bound)
  local counts, steps = {}, 0
  for i, t in ipairs(targets) do
    while true do
      if steps >= budget then return counts, { d, bound or "" } end
      steps = steps + 1
      local r
      if desc then
        local hi = bound and ("(" .. bound) or "+inf"
        r = redis.call("ZRANGE", key, hi, "(" .. t, "BYSCORE", "REV", "LIMIT", 0, 1, "WITHSCORES")
      else
        local lo = bound and ("(" .. bound) or "-inf"
        r = redis.call("ZRANGE", key, lo, "(" .. t, "BYSCORE", "LIMIT", 0, 1, "WITHSCORES")
      end
      if #r == 0 then break end
      d, bound = d + 1, r[2]
    end
    counts[i] = d
  end
  return counts, {}
end

local function count(targets)
  if style == "competition" then
    local counts = {}
    for i, t in ipairs(targets) do counts[i] = better(t) end
    return counts, {}
  elseif style == "dense" then
    return walk(targets, 0, nil)
  end
  return {}, {}
end

-- Scores as Redis prints them ("inf" included) to numbers, for sorting.
local function num(s)
  if s == "inf" or s == "+inf" then return math.huge end
  if s == "-inf" then return -math.huge end
  return tonumber(s)
end

-- The stored form of a tie-break board's member (as the apply script writes it).
local function enc(m, t, tie)
  if t < 0 then t = 0 elseif t > MAXT then t = MAXT end
  if tie == "d" then t = MAXT - t end
  return string.format("%012x", t) .. m
end

if mode == "walk" then
  local targets = {}
  for i = 7, #ARGV do targets[#targets + 1] = ARGV[i] end
  local bound = ARGV[6]
  if bound == "" then bound = nil end
  local counts, resume = walk(targets, tonumber(ARGV[5]), bound)
  return { 0, {}, targets, counts, resume }
end

local total = redis.call("ZCARD", key)

if mode == "range" then
  local rows
  if desc then
    rows = redis.call("ZREVRANGE", key, ARGV[5], ARGV[6], "WITHSCORES")
  else
    rows = redis.call("ZRANGE", key, ARGV[5], ARGV[6], "WITHSCORES")
  end
  -- A page is contiguous: only its first score needs counting, the rest
  -- follow from the page itself.
  local targets = {}
  if #rows > 0 then targets[1] = rows[2] end
  local counts, resume = count(targets)
  return { total, rows, targets, counts, resume }
end

-- members
local tie = ARGV[5]
local rows, targets, seen = {}, {}, {}
for i = 6, #ARGV do
  local id = ARGV[i]
  local stored = id
  if tie ~= "n" then
    local t = redis.call("HGET", KEYS[2], id)
    stored = t and enc(id, tonumber(t), tie) or nil
  end
  local s = stored and redis.call("ZSCORE", key, stored)
  if s then
    local r
    if desc then r = redis.call("ZREVRANK", key, stored) else r = redis.call("ZRANK", key, stored) end
    rows[#rows + 1] = i - 5
    rows[#rows + 1] = r
    rows[#rows + 1] = s
    if not seen[s] then
      seen[s] = true
      targets[#targets + 1] = s
    end
  end
end
if desc then
  table.sort(targets, function(a, b) return num(a) > num(b) end)
else
  table.sort(targets, function(a, b) return num(a) < num(b) end)
end
local counts, resume = count(targets)
return { total, rows, targets, counts, resume }

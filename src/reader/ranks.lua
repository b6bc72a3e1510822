-- rankflow read script (docs/http-api.md): what a sorted set alone can say about
-- rank styles, read in one round trip and one atomic look. It runs behind
-- the prelude src/sink/lua/composite.lua (how members are stored, the
-- dense-rank index entries), shared with the apply script.
--
-- KEYS[1]  the view's sorted set; KEYS[2] its K:t or K:f hash (members
--          mode); KEYS[3] its dense-rank index K:v (when ARGV[7] is "1")
-- ARGV[1]  mode: "range" | "members" | "walk" | "runs"
-- ARGV[2]  order: "desc" | "asc"
-- ARGV[3]  style: "ordinal" | "competition" | "dense" ("both": competition
--          and dense, runs mode only)
-- ARGV[4]  budget: most dense steps (one ZRANGE ... LIMIT 0 1 each) in this call
-- ARGV[5]  tie code ("n", "a", "d")
-- ARGV[6]  composite script code ("" for other boards)
-- ARGV[7]  "1" when the board keeps a dense-rank index, else "0"
-- range:   ARGV[8] start, ARGV[9] stop (0-based ranks, inclusive)
-- members: ARGV[8..] member ids
-- walk:    ARGV[8] count so far, ARGV[9] bound so far ("" = none),
--          ARGV[10..] target scores, best first (a continuation of "dense";
--          boards other than composite only)
-- runs:    ARGV[8..] pairs of 0-based ranks start, stop (inclusive), in
--          rank order and apart: several pages of one view read at once
--          (the live views' pollers)
--
-- Reply: { total, rows, targets, counts, resume }
--   total    ZCARD of the view (0: the key does not exist)
--   rows     range: { stored, score, ... } as ZREVRANGE/ZRANGE WITHSCORES;
--            members: { index, rank, score, target, stored, ... } (index
--            into the ids, 1-based; rank 0-based; target: the key of its
--            count; stored: the member as stored) for each id on the board
--   targets  what the counts are for, best first: distinct scores as Redis
--            prints them, or for composite boards distinct tuples (their
--            index entry text)
--   counts   per target: competition, members with a strictly better
--            value; dense, distinct values strictly better; empty for ordinal
--   resume   {} when every target is counted; { count, bound } when the
--            dense walk ran out of budget after #counts targets;
--            { "noindex" } when a composite board's dense ranks cannot be
--            counted (its view has no complete index)
-- runs mode: rows is one { stored, score, ... } per run, the targets are
--   the first values of the runs that are not empty, in order, and a sixth
--   element holds the competition counts when style is "both" (counts and
--   resume are then the dense ones), else {}, and a seventh is 1 when the
--   dense counts were walked (no usable index), else 0: a page deeper than
--   the budget of a walk is then refused like a read of it alone
--
-- Only commands of rankflow's ACL are called (ZCARD, ZRANGE, ZREVRANGE,
-- ZRANK, ZREVRANK, ZSCORE, HGET): "how many are better" is the rank of the
-- first member holding the value, found with ZRANGE ... BYSCORE LIMIT 0 1
-- (O(log n), as ZCOUNT); "how many distinct values are better" is the
-- value's rank in the index, O(log n).

local key = KEYS[1]
local mode, order, style = ARGV[1], ARGV[2], ARGV[3]
local budget = tonumber(ARGV[4])
local desc = order == "desc"
tie = ARGV[5]
if ARGV[6] ~= "" then cfields, cdir = cspec(ARGV[6]) end
local indexed = ARGV[7] == "1"
local ARG0 = 8
-- Whether dense counts were walked rather than read from the index.
local walked = false

-- Rank (0-based, board order) of a stored member of the view, or nil.
local function rank_of(k, stored)
  if desc then return redis.call("ZREVRANK", k, stored) end
  return redis.call("ZRANK", k, stored)
end

-- Stored member at 0-based rank i (board order).
local function at_rank(i)
  if desc then return redis.call("ZREVRANGE", key, i, i)[1] end
  return redis.call("ZRANGE", key, i, i)[1]
end

-- Members strictly better than score s (s is held by some member).
local function better(s)
  local first
  if desc then
    first = redis.call("ZRANGE", key, s, "-inf", "BYSCORE", "REV", "LIMIT", 0, 1)
  else
    first = redis.call("ZRANGE", key, s, "+inf", "BYSCORE", "LIMIT", 0, 1)
  end
  if #first == 0 then return 0 end
  return rank_of(key, first[1])
end

-- Composite boards: members strictly better than the tuple of `stored`
-- (score s) = rank of the tuple's first holder. Its holders are a run
-- inside the block of score s, after the block's better tuples: a binary
-- search over the block's ranks up to `stored`, O(log b * log n).
local function cbetter(stored, s)
  local n = ccodes_len()
  local codes = string.sub(stored, 1, n)
  local lo, hi = better(s), rank_of(key, stored)
  if n == 0 or not hi then return lo end
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if string.sub(at_rank(mid), 1, n) == codes then hi = mid else lo = mid + 1 end
  end
  return lo
end

-- Distinct scores strictly better than each target (best first), walking
-- from the best end one distinct score at a time: O(d log n) for d distinct
-- better scores. Stops after `budget` steps with where it got to. Used
-- when the view has no complete dense-rank index.
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

-- Whether the view's index can be read: kept by the board, and complete
-- (the apply script keeps it only from a view's first member on, so it
-- exists whenever the view has members).
local function index_usable()
  return indexed and redis.call("ZCARD", KEYS[3]) > 0
end

-- Counts for targets = { {text, stored, score}, ... } (best first).
local function count(targets)
  local counts = {}
  if style == "competition" then
    for i, t in ipairs(targets) do
      if cfields then counts[i] = cbetter(t[2], t[3]) else counts[i] = better(t[3]) end
    end
    return counts, {}
  elseif style == "dense" then
    if #targets == 0 then return counts, {} end
    if index_usable() then
      for i, t in ipairs(targets) do
        local r = rank_of(KEYS[3], t[1])
        -- An entry the index lacks would mean it is not what this script
        -- expects: count by walking rather than answer a wrong rank.
        if not r then counts = nil break end
        counts[i] = r
      end
      if counts then return counts, {} end
    end
    if cfields then return {}, { "noindex" } end
    local scores = {}
    for i, t in ipairs(targets) do scores[i] = t[3] end
    walked = true
    return walk(scores, 0, nil)
  end
  return counts, {}
end

-- The target of a member stored as `stored` with score s (Redis's text):
-- its index entry text, its stored form, its score.
local function target(stored, s)
  return { ventry(stored, rnum(s)), stored, s }
end

-- The texts of targets, as the reply lists them (composite: the entry;
-- otherwise the score as Redis printed it).
local function texts(targets)
  local out = {}
  for i, t in ipairs(targets) do
    if cfields then out[i] = t[1] else out[i] = t[3] end
  end
  return out
end

if mode == "runs" then
  local total = redis.call("ZCARD", key)
  local runs, targets = {}, {}
  for i = ARG0, #ARGV - 1, 2 do
    local rows
    if desc then
      rows = redis.call("ZREVRANGE", key, ARGV[i], ARGV[i + 1], "WITHSCORES")
    else
      rows = redis.call("ZRANGE", key, ARGV[i], ARGV[i + 1], "WITHSCORES")
    end
    runs[#runs + 1] = rows
    -- Each run is contiguous: only its first value needs counting.
    if #rows > 0 then targets[#targets + 1] = target(rows[1], rows[2]) end
  end
  local competition = {}
  if style == "both" then
    style = "competition"
    competition = count(targets)
    style = "dense"
  end
  local counts, resume = count(targets)
  return { total, runs, texts(targets), counts, resume, competition, walked and 1 or 0 }
end

if mode == "walk" then
  local targets = {}
  for i = ARG0 + 2, #ARGV do targets[#targets + 1] = ARGV[i] end
  local bound = ARGV[ARG0 + 1]
  if bound == "" then bound = nil end
  local counts, resume = walk(targets, tonumber(ARGV[ARG0]), bound)
  return { 0, {}, targets, counts, resume }
end

local total = redis.call("ZCARD", key)

if mode == "range" then
  local rows
  if desc then
    rows = redis.call("ZREVRANGE", key, ARGV[ARG0], ARGV[ARG0 + 1], "WITHSCORES")
  else
    rows = redis.call("ZRANGE", key, ARGV[ARG0], ARGV[ARG0 + 1], "WITHSCORES")
  end
  -- A page is contiguous: only its first value needs counting, the rest
  -- follow from the page itself.
  local targets = {}
  if #rows > 0 then targets[1] = target(rows[1], rows[2]) end
  local counts, resume = count(targets)
  return { total, rows, texts(targets), counts, resume }
end

-- members
-- The stored form of a tie-break board's member (as the apply script
-- writes it, clamping a time outside the tie key's range).
local function tstored(m, t)
  if t < 0 then t = 0 elseif t > MAXT then t = MAXT end
  return enc(m, t)
end

local rows, targets, seen = {}, {}, {}
for i = ARG0, #ARGV do
  local id = ARGV[i]
  local stored = id
  if cfields then
    local f = redis.call("HGET", KEYS[2], id)
    stored = f and cenc(id, cparse(f)) or nil
  elseif tie ~= "n" then
    local t = redis.call("HGET", KEYS[2], id)
    stored = t and tstored(id, tonumber(t)) or nil
  end
  local s = stored and redis.call("ZSCORE", key, stored)
  if s then
    local t = target(stored, s)
    local text = cfields and t[1] or s
    rows[#rows + 1] = i - ARG0 + 1
    rows[#rows + 1] = rank_of(key, stored)
    rows[#rows + 1] = s
    rows[#rows + 1] = text
    rows[#rows + 1] = stored
    if not seen[text] then
      seen[text] = true
      t.rank = rows[#rows - 3]
      targets[#targets + 1] = t
    end
  end
end
-- Best first: by any holder's ordinal rank (distinct values never
-- interleave in the board's order).
table.sort(targets, function(x, y) return x.rank < y.rank end)
local counts, resume = count(targets)
return { total, rows, texts(targets), counts, resume }

-- rankflow: decides the rate checks of a batch (docs/checks.md), one
-- member's state per key (`<prefix>:rate:{<bucket>}:<type>:<member>`, a
-- MessagePack array, docs/redis-layout.md):
--   [1] m     the newest event time decided for the member
--   [2] names partitions (`<topic>/<partition>`) its events came from
--   [3] f     per partition: the highest offset decided
--   [4] a     per partition: the highest offset known applied to the boards
--   [5..7]    passed events, sorted by event time: ts, partition, offset
--   [8..10]   quarantined events not yet applied: partition, offset, check
-- A decision is made once per event: an event at or below its partition's
-- `f` was decided before (a redelivery, or a batch sent again), and gets
-- the same answer from the lists; one at or below `a` was applied already
-- (its batch got through). Passed events are kept while they are within
-- the group's longest length of `m`, or not yet applied; quarantined ones
-- while not yet applied: the state stays bounded by the rate window.
--
-- ARGV: G, then per group: n, n x (count, length ms), ttl ms;
--       P, then P x (partition, applied offset);
--       then per key: group, k, k x (ts, partition index, offset).
-- Reply: per key a string, one letter per event: `p` passed, `d` applied
-- already, or string.char(64 + c) for quarantined by the group's check c.

local i = 1
local function take()
  local v = ARGV[i]
  i = i + 1
  return v
end

local groups = {}
for g = 1, tonumber(take()) do
  local n = tonumber(take())
  local checks, longest = {}, 0
  for c = 1, n do
    local count, length = tonumber(take()), tonumber(take())
    checks[c] = { count, length }
    if length > longest then longest = length end
  end
  groups[g] = { checks = checks, longest = longest, ttl = tonumber(take()) }
end

local parts, applied = {}, {}
for p = 1, tonumber(take()) do
  parts[p] = take()
  applied[parts[p]] = tonumber(take())
end

-- First position in the sorted list whose time is greater than t.
local function upper(ets, t)
  local lo, hi = 1, #ets + 1
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if ets[mid] <= t then lo = mid + 1 else hi = mid end
  end
  return lo
end

-- The state's index of partition `name`, added if new.
local function index_of(st, name)
  local names = st[2]
  for j = 1, #names do
    if names[j] == name then return j end
  end
  names[#names + 1] = name
  st[3][#names] = -1
  st[4][#names] = applied[name] or -1
  return #names
end

-- Drops what no decision needs any more.
local function prune(st, longest)
  local a, oldest = st[4], st[1] - longest
  local ets, epi, eoff = {}, {}, {}
  for j = 1, #st[5] do
    if st[5][j] > oldest or st[7][j] > a[st[6][j]] then
      ets[#ets + 1], epi[#epi + 1], eoff[#eoff + 1] = st[5][j], st[6][j], st[7][j]
    end
  end
  local qpi, qoff, qk = {}, {}, {}
  for j = 1, #st[8] do
    if st[9][j] > a[st[8][j]] then
      qpi[#qpi + 1], qoff[#qoff + 1], qk[#qk + 1] = st[8][j], st[9][j], st[10][j]
    end
  end
  st[5], st[6], st[7], st[8], st[9], st[10] = ets, epi, eoff, qpi, qoff, qk
end

-- The earlier decision on (partition si, offset off).
local function recall(st, si, off)
  for j = 1, #st[7] do
    if st[7][j] == off and st[6][j] == si then return "p" end
  end
  for j = 1, #st[9] do
    if st[9][j] == off and st[8][j] == si then return string.char(64 + st[10][j]) end
  end
  return "d"
end

-- A new decision on an event at ts: the first check whose count of passed
-- events within (ts - length, ts] is full already, or nil.
local function failing(st, group, ts)
  local hi = upper(st[5], ts)
  for c, check in ipairs(group.checks) do
    if hi - upper(st[5], ts - check[2]) >= check[1] then return c end
  end
  return nil
end

local function decide(st, group, ts, si, off)
  if off <= st[4][si] then return "d" end
  if off <= st[3][si] then return recall(st, si, off) end
  st[3][si] = off
  if ts > st[1] then st[1] = ts end
  local c = failing(st, group, ts)
  if c then
    local n = #st[8] + 1
    st[8][n], st[9][n], st[10][n] = si, off, c
    return string.char(64 + c)
  end
  local at = upper(st[5], ts)
  table.insert(st[5], at, ts)
  table.insert(st[6], at, si)
  table.insert(st[7], at, off)
  return "p"
end

local out = {}
for k = 1, #KEYS do
  local group = groups[tonumber(take())]
  local raw = redis.call("GET", KEYS[k])
  local st
  if raw then
    st = cmsgpack.unpack(raw)
  else
    st = { -9007199254740991, {}, {}, {}, {}, {}, {}, {}, {}, {} }
  end
  -- What the batch knows applied moves `a` on, for the partitions the
  -- member has events in.
  for j = 1, #st[2] do
    local known = applied[st[2][j]]
    if known and known > st[4][j] then st[4][j] = known end
  end
  prune(st, group.longest)
  local letters = {}
  for e = 1, tonumber(take()) do
    local ts, p, off = tonumber(take()), tonumber(take()), tonumber(take())
    letters[e] = decide(st, group, ts, index_of(st, parts[p]), off)
  end
  redis.call("SET", KEYS[k], cmsgpack.pack(st), "PX", group.ttl)
  out[k] = table.concat(letters)
end
return out

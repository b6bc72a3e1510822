-- rankflow: apply one batch's updates to ONE board instance (one hash tag,
-- hence one Redis Cluster slot), atomically with its offset fences.
--
-- Called once per board instance per batch. With no groups it only trims the
-- instance's windows (the background trimmer and trim-on-read use that).
-- The argument layout is written by src/sink/call.rs; docs/exactly-once.md and
-- docs/redis-layout.md describe the data it keeps.
--
-- KEYS[1]            fence hash: "<topic>/<partition>" -> highest applied offset
-- KEYS[2..]          per view, in order:
--                      period: K [, K:t]
--                      window: K [, K:t], K:log, K:n [, K:ord], K:cut
--                    (K:t when tie != "n" or agg == "last"; K:ord for max/min)
-- ARGV  now, agg, tie, fence_expire, ngroups, {field, lo, hi} x ngroups,
--       nviews, {kind, expire_at [, cutoff if kind == "w"]} x nviews,
--       then for each group, for each view: count, {member, value, ts [, bucket_end]} x count
--
-- Reply {1, applied, evicted, overflow, late, more, duplicates}
--    or {0, field, fence} when a group overlaps its fence partly (nothing written).

local now = tonumber(ARGV[1])
local agg = ARGV[2]
local tie = ARGV[3]            -- "n" none, "d" tie key = MAXT - t, "a" tie key = t
local fence_expire = tonumber(ARGV[4])
local fence = KEYS[1]

local MAX_EXACT = 9007199254740992  -- 2^53: larger magnitudes are not exact in a double
local MAXT = 281474976710655        -- 2^48 - 1: tie keys are 12 hex digits
local EVICT_BUDGET = 20000          -- bucket entries evicted per call, so one call stays short

local needs_t = (tie ~= "n") or (agg == "last")
local uses_ord = (agg == "max") or (agg == "min")

local function num(s)
  return string.format("%.17g", s)
end

-- Members of tie-break boards carry a 12-hex-digit tie key in front, so that
-- Redis's lexicographic order among equal scores is the tie-break order while
-- the score stays the exact value.
local function enc(m, t)
  if tie == "n" then return m end
  local k = t
  if tie == "d" then k = MAXT - t end
  return string.format("%012x", k) .. m
end

-- Current aggregate (V, T) of a member in a view, or nil.
local function get_state(view, m)
  local t = nil
  if needs_t then
    t = redis.call("HGET", view.t, m)
    if not t then return nil, nil end
    t = tonumber(t)
  end
  local v = redis.call("ZSCORE", view.key, enc(m, t))
  if not v then return nil, nil end
  return tonumber(v), t
end

local function set_state(view, m, oldt, v, t)
  if tie ~= "n" and oldt ~= nil and oldt ~= t then
    redis.call("ZREM", view.key, enc(m, oldt))
  end
  redis.call("ZADD", view.key, num(v), enc(m, t))
  if needs_t then redis.call("HSET", view.t, m, num(t)) end
end

local function remove_state(view, m)
  local v, t = get_state(view, m)
  if v == nil then return end
  redis.call("ZREM", view.key, enc(m, t))
  if needs_t then redis.call("HDEL", view.t, m) end
end

-- The aggregate rules; Rust pre-aggregates a batch with the same ones
-- (src/sink/aggregate.rs), which is sound because each is associative and
-- commutative. Returns the new (v, t), or nil when nothing changes.
local function combine(V, T, v, t)
  if V == nil then return v, t end
  if agg == "sum" then
    if T ~= nil and T > t then t = T end
    return V + v, t
  elseif agg == "max" then
    if v > V then return v, t end
    if v == V and T ~= nil and t < T then return V, t end
    return nil
  elseif agg == "min" then
    if v < V then return v, t end
    if v == V and T ~= nil and t < T then return V, t end
    return nil
  else -- last: the value of the greatest ts; equal ts -> the greater value
    if T == nil or t > T or (t == T and v > V) then return v, t end
    return nil
  end
end

-- Order-preserving bytes of a double (ascending), for the per-member
-- best-bucket index of max/min windows.
local function ordv(v)
  local b = { string.byte(struct.pack(">d", v), 1, 8) }
  if b[1] >= 128 then
    for i = 1, 8 do b[i] = 255 - b[i] end
  else
    b[1] = b[1] + 128
  end
  if agg == "max" then
    for i = 1, 8 do b[i] = 255 - b[i] end
  end
  return string.char(unpack(b))
end

local function ord_prefix(m)
  return string.format("%04x", #m) .. m
end

local function ord_entry(m, v, t, bend)
  return ord_prefix(m) .. ordv(v) .. string.format("%012x", t) .. bend
end

local function split_vt(s)
  local c = string.find(s, ",", 1, true)
  return tonumber(string.sub(s, 1, c - 1)), tonumber(string.sub(s, c + 1))
end

local function expire_at(key, at)
  if at <= 0 then return end
  local cur = redis.call("PEXPIRETIME", key)
  if cur < 0 or cur < at then redis.call("PEXPIREAT", key, at) end
end

local evicted = 0
local more = 0

-- Removes one member's entry of an evicted bucket from the window aggregate.
local function evict_entry(view, m, vt, bend)
  local bv, bt = split_vt(vt)
  if uses_ord then
    redis.call("ZREM", view.ord, ord_entry(m, bv, bt, bend))
    local p = ord_prefix(m)
    local best = redis.call("ZRANGEBYLEX", view.ord, "[" .. p, "(" .. p .. string.rep("\255", 9), "LIMIT", 0, 1)
    if #best == 0 then
      remove_state(view, m)
    else
      local e = best[1]
      local b = string.sub(e, #p + 21)
      local nv, nt = split_vt(redis.call("HGET", view.key .. ":b:" .. b, m))
      local _, oldt = get_state(view, m)
      set_state(view, m, oldt, nv, nt)
    end
    return
  end
  local n = redis.call("HINCRBY", view.n, m, -1)
  if n <= 0 then
    redis.call("HDEL", view.n, m)
    remove_state(view, m)
  elseif agg == "sum" then
    local V, T = get_state(view, m)
    if V ~= nil then set_state(view, m, T, V - bv, T) end
  end
  -- last: the member's latest bucket is still there, so its value stands.
end

-- Evicts the buckets that ended at or before the cutoff, within the budget.
local function trim(view)
  local stored = tonumber(redis.call("GET", view.cut) or "-1")
  if view.cutoff > stored then
    redis.call("SET", view.cut, num(view.cutoff))
    stored = view.cutoff
  end
  view.cutoff = stored
  local ends = redis.call("ZRANGEBYSCORE", view.log, "-inf", stored)
  for _, bend in ipairs(ends) do
    local bkey = view.key .. ":b:" .. bend
    -- Entries are deleted as they are evicted, so a call that runs out of
    -- budget leaves only unevicted ones, and the next call starts over.
    local cursor = "0"
    repeat
      if evicted >= EVICT_BUDGET then
        more = 1
        return
      end
      local page = redis.call("HSCAN", bkey, cursor, "COUNT", 500)
      cursor = page[1]
      local kv = page[2]
      if #kv > 0 then
        local fields = {}
        for i = 1, #kv, 2 do
          evict_entry(view, kv[i], kv[i + 1], bend)
          fields[#fields + 1] = kv[i]
          evicted = evicted + 1
        end
        redis.call("HDEL", bkey, unpack(fields))
      end
    until cursor == "0"
    redis.call("ZREMRANGEBYSCORE", view.log, "-inf", bend)
  end
end

-- 1. Fences: read every group's fence before writing anything.
local a = 5
local ngroups = tonumber(ARGV[a]); a = a + 1
local groups = {}
local duplicates = 0
for g = 1, ngroups do
  local field, lo, hi, hi_text = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), ARGV[a + 2]
  a = a + 3
  local skip = false
  local f = redis.call("HGET", fence, field)
  if f then
    f = tonumber(f)
    if hi <= f then
      skip = true
      duplicates = duplicates + 1
    elseif lo <= f then
      return { 0, field, f }
    end
  end
  groups[g] = { field = field, hi = hi_text, skip = skip }
end

-- 2. Views: bind keys, trim windows to the clock.
local nviews = tonumber(ARGV[a]); a = a + 1
local views = {}
local k = 2
for v = 1, nviews do
  local view = { kind = ARGV[a], exp = tonumber(ARGV[a + 1]), key = KEYS[k] }
  a = a + 2
  k = k + 1
  if needs_t then view.t = KEYS[k]; k = k + 1 end
  if view.kind == "w" then
    view.cutoff = tonumber(ARGV[a]); a = a + 1
    view.log = KEYS[k]; view.n = KEYS[k + 1]; k = k + 2
    if uses_ord then view.ord = KEYS[k]; k = k + 1 end
    view.cut = KEYS[k]; k = k + 1
    trim(view)
  end
  views[v] = view
end

-- 3. Updates.
local applied, overflow, late = 0, 0, 0
for g = 1, ngroups do
  local skip = groups[g].skip
  for v = 1, nviews do
    local view = views[v]
    local count = tonumber(ARGV[a]); a = a + 1
    local width = 3
    if view.kind == "w" then width = 4 end
    if not skip then
      for i = 0, count - 1 do
        local base = a + i * width
        local m, dv, dt = ARGV[base], tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])
        if view.kind == "p" then
          if agg == "sum" and tie == "n" then
            -- Fast path: the score is the plain sum.
            local cur = tonumber(redis.call("ZSCORE", view.key, m) or "0")
            local nv = cur + dv
            if nv > MAX_EXACT or nv < -MAX_EXACT then
              overflow = overflow + 1
            else
              redis.call("ZADD", view.key, num(nv), m)
              applied = applied + 1
            end
          else
            local V, T = get_state(view, m)
            local nv, nt = combine(V, T, dv, dt)
            if nv ~= nil then
              if nv > MAX_EXACT or nv < -MAX_EXACT then
                overflow = overflow + 1
              else
                set_state(view, m, T, nv, nt)
                applied = applied + 1
              end
            end
          end
        else
          local bend = ARGV[base + 3]
          if tonumber(bend) <= view.cutoff then
            late = late + 1
          else
            local bkey = view.key .. ":b:" .. bend
            local old = redis.call("HGET", bkey, m)
            local bv, bt = nil, nil
            if old then bv, bt = split_vt(old) end
            local nbv, nbt = combine(bv, bt, dv, dt)
            local V, T = get_state(view, m)
            local nv, nt = nil, nil
            if nbv ~= nil then nv, nt = combine(V, T, dv, dt) end
            if nbv == nil then
              -- The bucket already holds a better value: nothing changes.
            elseif nv ~= nil and (nv > MAX_EXACT or nv < -MAX_EXACT) then
              overflow = overflow + 1
            elseif nbv > MAX_EXACT or nbv < -MAX_EXACT then
              overflow = overflow + 1
            else
              if not old then
                redis.call("ZADD", view.log, bend, bend)
                -- A day past the window's own expiry: trimming, not the TTL,
                -- removes a bucket, and must find it to subtract it.
                expire_at(bkey, view.exp + 86400000)
                if not uses_ord then redis.call("HINCRBY", view.n, m, 1) end
              elseif uses_ord then
                redis.call("ZREM", view.ord, ord_entry(m, bv, bt, bend))
              end
              if uses_ord then
                redis.call("ZADD", view.ord, 0, ord_entry(m, nbv, nbt, bend))
              end
              redis.call("HSET", bkey, m, num(nbv) .. "," .. num(nbt))
              if nv ~= nil then set_state(view, m, T, nv, nt) end
              applied = applied + 1
            end
          end
        end
      end
    end
    a = a + count * width
  end
end

-- 4. Expiry and fences, only when something was written for a live group.
local wrote = false
for g = 1, ngroups do
  if not groups[g].skip then
    redis.call("HSET", fence, groups[g].field, groups[g].hi)
    wrote = true
  end
end
if wrote then
  for v = 1, nviews do
    local view = views[v]
    if view.exp > 0 then
      expire_at(view.key, view.exp)
      if needs_t then expire_at(view.t, view.exp) end
      if view.kind == "w" then
        expire_at(view.log, view.exp)
        expire_at(view.n, view.exp)
        expire_at(view.cut, view.exp)
        if uses_ord then expire_at(view.ord, view.exp) end
      end
    end
  end
  if fence_expire < 0 then
    redis.call("PERSIST", fence)
  else
    expire_at(fence, fence_expire)
  end
end

return { 1, applied, evicted, overflow, late, more, duplicates }

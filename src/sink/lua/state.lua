-- rankflow: how the apply script reads and writes a member's state in a
-- view (periods, windows, composite boards, the dense-rank index), joined
-- after the prelude (composite.lua) and before apply.lua and move.lua,
-- which share every function here. It defines locals only.

local now = tonumber(ARGV[1])
-- Rules of the instance being applied; set per instance below and read by
-- the helper functions.
-- (tie, cfields and cdir are the prelude's, src/sink/lua/composite.lua.)
local agg, needs_t, uses_ord

local EVICT_BUDGET = 20000          -- bucket entries evicted per call, so one call stays short
local CLOSED = -2                   -- the reply's cutoff of a closed period view

-- What windows, composite boards and moves need is defined only in calls
-- that have them: Redis runs the whole script on every call, and defining
-- every function took about 10 µs of each call (BENCHMARKS.md), most of a
-- small call's cost; a Redis Cluster sends hundreds of small calls per
-- batch. The encoder marks such calls' instance count "x<n>"
-- (src/sink/call.rs); moves say "move". The definitions below stay where
-- they were, inside `if extras then ... end`, assigning these locals.
local extras = ARGV[2] == "move" or string.sub(ARGV[3] or "", 1, 1) == "x"
local get_state, dense_moved, set_state, remove_state, ctuple_shared, cwrite
local apply_composite, ordv, ord_prefix, ord_entry, split_vt, evict_entry
local cordv, cord_prefix, cord_entry, cuses_ord, cbest, cevict
local wchunk_buckets, wchunk_flush, apply_window_chunk, evict_page, trim
local apply_window, apply_cwindow

if extras then
-- Current aggregate (V, T) of a member in a view, or nil.
function get_state(view, m)
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

-- Keeps the dense-rank index (K:v, see the prelude) of a plain, tie-break
-- or min/max view after a member's value went from oldv to newv (nil:
-- absent; false too, as Redis replies say it), when the view keeps a
-- complete index (view.v). The old value's entry goes when no member holds
-- it any more: one O(log n) look for the first member with that score.
function dense_moved(view, oldv, newv)
  local vk = view.v
  if not vk or oldv == newv then return end
  if newv then redis.call("ZADD", vk, num(newv), vtext(newv)) end
  if oldv then
    local s = num(oldv)
    if redis.call("ZCOUNT", view.key, s, s) == 0 then
      redis.call("ZREM", vk, vtext(oldv))
    end
  end
end

-- oldv: the member's value before (nil when it had none), for the index.
function set_state(view, m, oldt, v, t, oldv)
  if tie ~= "n" and oldt ~= nil and oldt ~= t then
    redis.call("ZREM", view.key, enc(m, oldt))
  end
  redis.call("ZADD", view.key, num(v), enc(m, t))
  if needs_t then redis.call("HSET", view.t, m, num(t)) end
  dense_moved(view, oldv, v)
end

function remove_state(view, m)
  local v, t = get_state(view, m)
  if v == nil then return end
  redis.call("ZREM", view.key, enc(m, t))
  if needs_t then redis.call("HDEL", view.t, m) end
  dense_moved(view, v, nil)
end
end -- extras

-- The aggregate rules; Rust pre-aggregates a batch with the same ones
-- (src/sink/aggregate.rs), which is sound because each is associative and
-- commutative. Returns the new (v, t), or nil when nothing changes.
local function combine_rule(rule, V, T, v, t)
  if V == nil then return v, t end
  if rule == "sum" then
    if T ~= nil and T > t then t = T end
    return V + v, t
  elseif rule == "max" then
    if v > V then return v, t end
    if v == V and T ~= nil and t < T then return V, t end
    return nil
  elseif rule == "min" then
    if v < V then return v, t end
    if v == V and T ~= nil and t < T then return V, t end
    return nil
  else -- last: the value of the greatest ts; equal ts -> the greater value
    if T == nil or t > T or (t == T and v > V) then return v, t end
    return nil
  end
end

local function combine(V, T, v, t)
  return combine_rule(agg, V, T, v, t)
end

if extras then
-- Whether a member other than `stored` (score x) holds its tuple (all
-- fields equal). Holders of a tuple are contiguous in the board, so one is
-- next to `stored` if any is: two O(log n) commands, and no count to keep.
function ctuple_shared(view, stored, x)
  local r = redis.call("ZRANK", view.key, stored)
  if not r then return false end
  local lo = r - 1
  if lo < 0 then lo = 0 end
  local near = redis.call("ZRANGE", view.key, lo, r + 1, "WITHSCORES")
  local n = ccodes_len()
  local codes = string.sub(stored, 1, n)
  for j = 1, #near, 2 do
    if near[j] ~= stored and string.sub(near[j], 1, n) == codes and rnum(near[j + 1]) == x then
      return true
    end
  end
  return false
end

-- Every write of a composite member goes through here: its old state st
-- (nil when it had none) is replaced by nst (nil removes the member).
-- With a complete dense index (view.v), the tuple's entry is kept too.
function cwrite(view, m, st, nst)
  local old = st and cenc(m, st)
  local oe, ne, kept
  if view.v then
    oe = st and ventry(old, cscore_num(st))
    ne = nst and ventry(cenc(m, nst), cscore_num(nst))
    -- Looked at before the member moves, while it marks the tuple's place.
    if oe and oe ~= ne then kept = ctuple_shared(view, old, cscore_num(st)) end
  end
  if st then redis.call("ZREM", view.key, old) end
  if nst then
    redis.call("ZADD", view.key, cscore(nst), cenc(m, nst))
    redis.call("HSET", view.f, m, cser(nst))
  else
    redis.call("HDEL", view.f, m)
  end
  if view.v then
    if ne and ne ~= oe then redis.call("ZADD", view.v, cscore(nst), ne) end
    if oe and oe ~= ne and not kept then redis.call("ZREM", view.v, oe) end
  end
end

-- One composite update of a period view (fields: per field {value,
-- time} or false, as decoded). Returns 1 applied, 2 overflow, 0 no change.
function apply_composite(view, m, fields)
  local old = redis.call("HGET", view.f, m)
  local st = {}
  if old then st = cparse(old) end
  local nst = {}
  local changed = false
  for i = 1, #cfields do
    local cur = st[i] or false
    local u = fields[i]
    if u then
      local dv, dt = u[1], u[2]
      local V, T = nil, nil
      if cur then V, T = cur[1], cur[2] end
      local rule = cfields[i].rule
      local nv, nt = combine_rule(rule, V, T, dv, dt)
      if nv ~= nil then
        -- A sum rounded past 2^53 can land on 2^53 itself: undo it to see.
        if nv > MAX_EXACT or nv < -MAX_EXACT or (rule == "sum" and V ~= nil and nv - V ~= dv) then
          return 2
        end
        if not cur or nv ~= cur[1] or nt ~= cur[2] then
          cur = { nv, nt }
          changed = true
        end
      end
    end
    nst[i] = cur
  end
  if not changed then return 0 end
  cwrite(view, m, old and st or nil, nst)
  return 1
end

-- Order-preserving bytes of a double (ascending), for the per-member
-- best-bucket index of max/min windows.
function ordv(v)
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

function ord_prefix(m)
  return string.format("%04x", #m) .. m
end

function ord_entry(m, v, t, bend)
  return ord_prefix(m) .. ordv(v) .. string.format("%012x", t) .. bend
end

-- A bucket entry is "value,time", or just "value" for plain sums, which
-- never need the time (it saves a sixth of a window's memory).
function split_vt(s)
  local c = string.find(s, ",", 1, true)
  if not c then return tonumber(s), nil end
  return tonumber(string.sub(s, 1, c - 1)), tonumber(string.sub(s, c + 1))
end
end -- extras

local function expire_at(key, at)
  if at <= 0 then return end
  local cur = redis.call("PEXPIRETIME", key)
  if cur < 0 or cur < at then redis.call("PEXPIREAT", key, at) end
end

-- Plain-sum period views skip checking totals while a bound proves none
-- can leave the exact range: the fence hash keeps, per view kind
-- ("~abs:day"), the sum of |delta| ever added to that kind's keys, hence
-- an upper bound of every |score| in them. Under 2^52 (half the exact
-- range, leaving room for the rounding of the bound itself) updates are
-- added unchecked (add_packed, apply_fast_chunk); above it each total is checked.
-- (The chunked path reads the old scores anyway, but the bound is still
-- kept and written the same way: other consumers of the fence hash rely
-- on it.) The bound lives and expires with the fences, which outlive
-- every view they guard.
local BOUND_LIMIT = MAX_EXACT / 2

-- Entries evicted for the current instance and in the whole call, and
-- whether the instance's eviction stopped at the call's budget.
local evicted = 0
local call_evicted = 0
local evict_more = false

if extras then
-- Removes one member's entry of an evicted bucket from the window aggregate.
function evict_entry(view, m, vt, bend)
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
      local oldv, oldt = get_state(view, m)
      set_state(view, m, oldt, nv, nt, oldv)
    end
    return
  end
  local n = redis.call("HINCRBY", view.n, m, -1)
  if n <= 0 then
    redis.call("HDEL", view.n, m)
    remove_state(view, m)
  elseif agg == "sum" then
    local V, T = get_state(view, m)
    if V ~= nil then set_state(view, m, T, V - bv, T, V) end
  end
  -- last: the member's latest bucket is still there, so its value stands.
end

-- Composite windows. A bucket hash K:b:<end> maps a member to its fields
-- from that bucket's events (K:f text: "value:time" or "" per field); K:f
-- holds the window's fields, combined over the buckets still in it.
-- Evicting a bucket (oldest first, so every older bucket is gone already)
-- takes its share out of each field it holds:
--   sum, last: a field's time is its latest event's (sum: the latest
--     contribution; last: the value kept). If that time is before the
--     evicted bucket's end, every event of the field was in this bucket or
--     an older one: the field becomes missing. Otherwise a newer bucket
--     holds the field; a sum subtracts this bucket's value, a last keeps
--     its value (it came from the newer bucket).
--   max, min: K:ord lists, per (field, member, bucket), the bucket's value
--     best first (then the earliest time); the field becomes its next best
--     entry, or missing when none is left.
-- A member without any field left is removed.

-- ordv for one field's rule (ordv reads the instance's `agg`).
function cordv(v, rule)
  local b = { string.byte(struct.pack(">d", v), 1, 8) }
  if b[1] >= 128 then
    for i = 1, 8 do b[i] = 255 - b[i] end
  else
    b[1] = b[1] + 128
  end
  if rule == "max" then
    for i = 1, 8 do b[i] = 255 - b[i] end
  end
  return string.char(unpack(b))
end

function cord_prefix(i, m)
  return tostring(i) .. ord_prefix(m)
end

function cord_entry(i, m, f, bend)
  return cord_prefix(i, m) .. cordv(f[1], cfields[i].rule) .. string.format("%012x", f[2]) .. bend
end

function cuses_ord(i)
  local rule = cfields[i].rule
  return rule == "max" or rule == "min"
end

-- A max/min field's best (value, time) over the buckets left, or false.
function cbest(view, i, m)
  local p = cord_prefix(i, m)
  local best = redis.call("ZRANGEBYLEX", view.ord, "[" .. p, "(" .. p .. string.rep("\255", 9), "LIMIT", 0, 1)
  if #best == 0 then return false end
  local b = string.sub(best[1], #p + 21)
  local text = redis.call("HGET", view.key .. ":b:" .. b, m)
  if not text then return false end
  return cparse(text)[i] or false
end

-- Removes one member's entry (K:f text) of the evicted bucket ending at bend.
function cevict(view, m, text, bend)
  local bst = cparse(text)
  local nb = tonumber(bend)
  local old = redis.call("HGET", view.f, m)
  local st = {}
  if old then st = cparse(old) end
  local nst = {}
  local changed, left = false, false
  for i = 1, #cfields do
    local cur = st[i] or false
    local b = bst[i]
    if b then
      if cuses_ord(i) then
        redis.call("ZREM", view.ord, cord_entry(i, m, b, bend))
        -- Another bucket's entry is the best unless this one was.
        if cur and cur[1] == b[1] and cur[2] == b[2] then
          cur = cbest(view, i, m)
          changed = true
        end
      elseif cur and cur[2] < nb then
        cur = false
        changed = true
      elseif cur and cfields[i].rule == "sum" then
        cur = { cur[1] - b[1], cur[2] }
        changed = true
      end
    end
    nst[i] = cur
    if cur then left = true end
  end
  if not changed or not old then return end
  if left then cwrite(view, m, st, nst) else cwrite(view, m, st, nil) end
end
end -- extras

-- Whether a new total leaves the exact range. A sum just past 2^53 rounds
-- onto 2^53 itself, so a total landing exactly there is undone to see
-- (old is nil when nothing was added to).
local function out_of_range(old, delta, new)
  if new > MAX_EXACT or new < -MAX_EXACT then return true end
  return (new == MAX_EXACT or new == -MAX_EXACT) and old ~= nil and new - old ~= delta
end

-- Vectorised state (issue 14): a view's updates go in chunks of at most
-- CHUNK, and each chunk reads the state of all its members at once (HMGET
-- K:t, ZMSCORE K), combines in Lua (Lua numbers are doubles like Redis's
-- scores, so old + delta here is what ZINCRBY computes) and writes once
-- (variadic ZREM / ZADD / HSET / HDEL). A call then costs a few commands
-- per chunk instead of several per update. CHUNK keeps every variadic
-- command under Lua's C stack limit (LUAI_MAXCSTACK, 8000 values).
local CHUNK = 1000

local sunpack = struct.unpack

-- A view's packed updates (see the layout at the top) as arrays indexed
-- 1..n: U.m members, U.v values, U.t times (nil without), U.b bucket
-- ends (text, as in key names), U.f composite fields ({value, time} or
-- false per field). view.bnum maps a bucket end's text to its number.
local function decode(view, p, with_t, nfields)
  local U = { m = {}, v = {}, t = {}, b = {}, f = {}, n = 0 }
  local pos, len = 1, #p
  -- A view without updates (trim-only calls) has an empty argument.
  if len == 0 then return U end
  local ends
  if view.kind == "w" then
    local nb
    nb, pos = sunpack("<I4", p, pos)
    ends, view.bnum = {}, {}
    for j = 1, nb do
      local e
      e, pos = sunpack("<I4c0", p, pos)
      ends[j] = e
      view.bnum[e] = tonumber(e)
    end
  end
  local ms, vs, ts, bs, fs = U.m, U.v, U.t, U.b, U.f
  local n = 0
  while pos <= len do
    n = n + 1
    local m
    if nfields then
      m, pos = sunpack("<I4c0", p, pos)
      local f = {}
      for i = 1, nfields do
        local has
        has, pos = sunpack("<B", p, pos)
        if has == 1 then
          local fv, ft
          fv, ft, pos = sunpack("<dd", p, pos)
          f[i] = { fv, ft }
        else
          f[i] = false
        end
      end
      fs[n] = f
    elseif ends then
      local bi
      m, vs[n], ts[n], bi, pos = sunpack("<I4c0ddI4", p, pos)
      bs[n] = ends[bi]
    elseif with_t then
      m, vs[n], ts[n], pos = sunpack("<I4c0dd", p, pos)
    else
      m, vs[n], pos = sunpack("<I4c0d", p, pos)
    end
    ms[n] = m
    if nfields and ends then
      local bi
      bi, pos = sunpack("<I4", p, pos)
      bs[n] = ends[bi]
    end
  end
  U.n = n
  return U
end

-- Reads the state (V, T) of the distinct members ms. Returns a cache
-- {list = ms, n, idx = m -> i, v, t, ov, ot, oe} of arrays indexed by
-- the member's place i in ms (v, t: the state, changed in Lua by the
-- updates; ov, ot: as read; oe: the member as stored, kept so st_flush
-- need not encode it again), which st_flush writes back. Arrays rather
-- than a table per member: one small table per member and view was a
-- good part of the script's allocation and garbage collection.
local function st_load(view, ms)
  local n = #ms
  local idx, V, T, OV, OT, OE = {}, {}, {}, {}, {}, {}
  local c = { list = ms, n = n, idx = idx, v = V, t = T, ov = OV, ot = OT, oe = OE }
  if n == 0 then return c end
  local ts, encs = nil, ms
  if needs_t then
    ts = redis.call("HMGET", view.t, unpack(ms))
    encs = {}
    for i = 1, n do
      local t = tonumber(ts[i])
      ts[i] = t
      encs[i] = enc(ms[i], t or 0)
    end
  end
  local vs = redis.call("ZMSCORE", view.key, unpack(encs))
  for i = 1, n do
    idx[ms[i]] = i
    OE[i] = encs[i]
    -- Without its K:t entry a member has no state, as in get_state.
    if vs[i] and (ts == nil or ts[i]) then
      local v = tonumber(vs[i])
      V[i], OV[i] = v, v
      if ts then T[i], OT[i] = ts[i], ts[i] end
    end
  end
  return c
end
-- The dense-rank index after a chunk's writes: each new value is added
-- (ZADD of an entry already there changes nothing), and an old value
-- leaves only when no member holds it any more. A value some member of
-- the chunk now holds is kept without a look; every other old value costs
-- one O(log n) count of the members with that score (ZCOUNT: an integer
-- reply, where ZRANGE .. LIMIT 0 1 built a table). glist holds the old
-- values' texts (vtext), which are also their exact scores.
local function st_dense(view, added, alist, glist)
  if #alist > 0 then redis.call("ZADD", view.v, unpack(alist)) end
  local rem, nrem = {}, 0
  for _, text in ipairs(glist) do
    if not added[text] and redis.call("ZCOUNT", view.key, text, text) == 0 then
      nrem = nrem + 1
      rem[nrem] = text
    end
  end
  if nrem > 0 then redis.call("ZREM", view.v, unpack(rem)) end
end

-- Writes back the members of cache c whose state changed: the old
-- encoded members that go (tie-break boards re-encode on a new time, and
-- removed members), the new scores, K:t, and the dense index. Each text is
-- made once (Lua's string.format and the strings it makes are a large
-- part of the script's time): the old member as st_load encoded it, the
-- new one only when the time changed, the index entry from the score's
-- text (vtext and num differ only for zero).
local function st_flush(view, c)
  local zrem, zadd, hset, hdel = {}, {}, {}, {}
  local nzrem, nzadd, nhset, nhdel = 0, 0, 0, 0
  local added, alist, gone, glist = {}, {}, {}, {}
  local nalist, nglist = 0, 0
  local dense = view.v
  local list, V, T, OV, OT, OE = c.list, c.v, c.t, c.ov, c.ot, c.oe
  for i = 1, c.n do
    local m = list[i]
    local v, t, ov, ot = V[i], T[i], OV[i], OT[i]
    if v ~= ov or t ~= ot then
      local oenc, nenc = nil, nil
      if ov ~= nil then oenc = OE[i] end
      if v ~= nil then
        if oenc and t == ot then nenc = oenc else nenc = enc(m, t) end
      end
      if oenc and oenc ~= nenc then
        nzrem = nzrem + 1
        zrem[nzrem] = oenc
      end
      local score = nil
      if nenc then
        score = num(v)
        zadd[nzadd + 1] = score
        zadd[nzadd + 2] = nenc
        nzadd = nzadd + 2
        if needs_t then
          hset[nhset + 1] = m
          hset[nhset + 2] = num(t)
          nhset = nhset + 2
        end
      elseif needs_t and oenc then
        nhdel = nhdel + 1
        hdel[nhdel] = m
      end
      if dense and v ~= ov then
        if score then
          local text = score
          if v == 0 then text = "0" end
          if not added[text] then
            added[text] = true
            alist[nalist + 1] = score
            alist[nalist + 2] = text
            nalist = nalist + 2
          end
        end
        if ov ~= nil then
          local text = vtext(ov)
          if not gone[text] then
            gone[text] = true
            nglist = nglist + 1
            glist[nglist] = text
          end
        end
      end
    end
  end
  if nzrem > 0 then redis.call("ZREM", view.key, unpack(zrem)) end
  if nzadd > 0 then redis.call("ZADD", view.key, unpack(zadd)) end
  if nhset > 0 then redis.call("HSET", view.t, unpack(hset)) end
  if nhdel > 0 then redis.call("HDEL", view.t, unpack(hdel)) end
  if dense then st_dense(view, added, alist, glist) end
end

-- The distinct members of updates from .. to (decoded updates U).
local function chunk_members(U, from, to)
  local ms, seen, n = {}, {}, 0
  local um = U.m
  for u = from, to do
    local m = um[u]
    if not seen[m] then
      seen[m] = true
      n = n + 1
      ms[n] = m
    end
  end
  return ms
end

-- A plain sum far from the exact limit (see BOUND_LIMIT) with no
-- dense-rank index: no total needs checking or reading, and each member is
-- added to with ZADD INCR (ZINCRBY's work, under the ZADD the documented
-- ACL grants) as the view's packed argument is read (see decode; a plain
-- sum's updates have no bucket): one look-up per member. Reading the totals
-- back (ZMSCORE) and writing them (ZADD) looked each member up twice, had
-- Redis print each total with "%.17g" for Lua to parse, and on a small
-- sorted set (a listpack, under 128 members: a board of receivers, most
-- scopes) each look-up is a linear scan; building decode's arrays first
-- cost another 5% (BENCHMARKS.md, "Plain sums added in place"). A member
-- new to the view takes the delta itself. Returns the number applied.
local function add_packed(view, p, with_t)
  local key, pos, len, n = view.key, 1, #p, 0
  local m, v, t
  while pos <= len do
    if with_t then
      m, v, t, pos = sunpack("<I4c0dd", p, pos)
    else
      m, v, pos = sunpack("<I4c0d", p, pos)
    end
    redis.call("ZADD", key, "INCR", num(v), m)
    n = n + 1
  end
  return n
end

-- A chunk of a plain sum far from the exact limit with a dense-rank index
-- to keep: the old totals are read, for the index. Returns the number
-- applied.
local function apply_fast_chunk(view, U, from, to)
  local c = st_load(view, chunk_members(U, from, to))
  local idx, V, um, uv = c.idx, c.v, U.m, U.v
  for u = from, to do
    local i = idx[um[u]]
    local x = V[i]
    if x == nil then V[i] = uv[u] else V[i] = x + uv[u] end
  end
  st_flush(view, c)
  return to - from + 1
end
-- A chunk of a period view (not composite). Returns applied, overflow.
local function apply_period_chunk(view, U, from, to)
  local c = st_load(view, chunk_members(U, from, to))
  local idx, V, T = c.idx, c.v, c.t
  local applied, overflow = 0, 0
  local plain = agg == "sum" and tie == "n"
  for u = from, to do
    local i = idx[U.m[u]]
    local dv = U.v[u]
    if plain then
      -- Near the exact limit: each total is checked before it is kept.
      local cur = V[i] or 0
      local nv = cur + dv
      if out_of_range(cur, dv, nv) then
        overflow = overflow + 1
      else
        V[i] = nv
        applied = applied + 1
      end
    else
      local nv, nt = combine(V[i], T[i], dv, U.t[u])
      if nv ~= nil then
        if out_of_range(agg == "sum" and V[i] or nil, dv, nv) then
          overflow = overflow + 1
        else
          V[i], T[i] = nv, nt
          applied = applied + 1
        end
      end
    end
  end
  st_flush(view, c)
  return applied, overflow
end

if extras then
-- The buckets a window chunk writes to: bend -> {list, n, idx = m -> j,
-- v, t, had, dirty} (arrays indexed by the member's place j in list: the
-- bucket's value and time for the member, whether the bucket held it
-- before, whether it changed), read with one HMGET per distinct bucket;
-- bl lists the bucket ends in order of appearance.
-- Updates of buckets the cutoff already passed are late and left out.
function wchunk_buckets(view, U, from, to)
  local bs, bl = {}, {}
  local bnum, cutoff = view.bnum, view.cutoff
  local um, ub = U.m, U.b
  for u = from, to do
    local m, bend = um[u], ub[u]
    if bnum[bend] > cutoff then
      local b = bs[bend]
      if not b then
        b = { list = {}, idx = {}, n = 0, v = {}, t = {}, had = {}, dirty = {} }
        bs[bend] = b
        bl[#bl + 1] = bend
      end
      if not b.idx[m] then
        b.n = b.n + 1
        b.idx[m] = b.n
        b.list[b.n] = m
      end
    end
  end
  for _, bend in ipairs(bl) do
    local b = bs[bend]
    local list, bv, bt, had = b.list, b.v, b.t, b.had
    local got = redis.call("HMGET", view.key .. ":b:" .. bend, unpack(list))
    for i = 1, b.n do
      local g = got[i]
      if g then
        bv[i], bt[i] = split_vt(g)
        had[i] = true
      end
    end
  end
  return bs, bl
end

-- Writes a window chunk's buckets back: one HSET per bucket, and for a
-- bucket that got a new member its log entry and expiry (a day past the
-- bucket's own end of life: trimming, not the TTL, removes a bucket, and
-- must find it to subtract it; set after the HSET, as an expiry on a key
-- not yet there is lost). ninc: member -> new buckets it entered (nl in
-- order), counted in K:n.
function wchunk_flush(view, bs, bl, ninc, nl)
  local plain = agg == "sum" and tie == "n"
  for _, bend in ipairs(bl) do
    local b = bs[bend]
    local bkey = view.key .. ":b:" .. bend
    local hset, nh = {}, 0
    local list, bv, bt, dirty = b.list, b.v, b.t, b.dirty
    for i = 1, b.n do
      if dirty[i] then
        hset[nh + 1] = list[i]
        if plain then
          hset[nh + 2] = num(bv[i])
        else
          hset[nh + 2] = num(bv[i]) .. "," .. num(bt[i])
        end
        nh = nh + 2
      end
    end
    if nh > 0 then redis.call("HSET", bkey, unpack(hset)) end
    if b.new then
      redis.call("ZADD", view.log, bend, bend)
      redis.call("PEXPIREAT", bkey, tonumber(bend) + view.len + 86400000)
    end
  end
  if #nl > 0 then
    local got = redis.call("HMGET", view.n, unpack(nl))
    local hset = {}
    for i, m in ipairs(nl) do
      hset[#hset + 1] = m
      hset[#hset + 1] = string.format("%d", (tonumber(got[i]) or 0) + ninc[m])
    end
    redis.call("HSET", view.n, unpack(hset))
  end
end

-- A chunk of a sum or last window (max/min keep apply_window: see K:ord).
-- Same decisions as apply_window, on states read once per chunk.
-- Returns applied, overflow, late.
function apply_window_chunk(view, U, from, to)
  local bs, bl = wchunk_buckets(view, U, from, to)
  local c = st_load(view, chunk_members(U, from, to))
  local idx, V, T = c.idx, c.v, c.t
  local ninc, nl = {}, {}
  local applied, overflow, late = 0, 0, 0
  local summed = agg == "sum"
  for u = from, to do
    local m, bend = U.m[u], U.b[u]
    local b = bs[bend]
    if not b then
      late = late + 1
    else
      local j, i = b.idx[m], idx[m]
      local bv, v = b.v[j], V[i]
      local dv, dt = U.v[u], U.t[u]
      local nbv, nbt = combine(bv, b.t[j], dv, dt)
      -- nil: the bucket already holds a better value, nothing changes.
      if nbv ~= nil then
        local nv, nt = combine(v, T[i], dv, dt)
        if (nv ~= nil and out_of_range(summed and v or nil, dv, nv))
            or out_of_range(summed and bv or nil, dv, nbv) then
          overflow = overflow + 1
        else
          if not b.had[j] then
            b.had[j], b.new = true, true
            if not ninc[m] then
              ninc[m] = 0
              nl[#nl + 1] = m
            end
            ninc[m] = ninc[m] + 1
          end
          b.v[j], b.t[j], b.dirty[j] = nbv, nbt, true
          if nv ~= nil then V[i], T[i] = nv, nt end
          applied = applied + 1
        end
      end
    end
  end
  wchunk_flush(view, bs, bl, ninc, nl)
  st_flush(view, c)
  return applied, overflow, late
end
-- Evicts one HSCAN page (kv: member, entry, ...) of the bucket ending at
-- bend from a sum or last window, as evict_entry does one entry: K:n is
-- read and written once for the page, the states through st_load and
-- st_flush. A member whose count reaches 0 leaves the window; a sum's
-- other members lose the bucket's value (a last keeps its value: the
-- member's latest bucket is still there).
function evict_page(view, kv)
  local ms, vals, seen = {}, {}, {}
  for i = 1, #kv, 2 do
    -- HSCAN may return a field twice; it is one entry.
    if not seen[kv[i]] then
      seen[kv[i]] = true
      ms[#ms + 1] = kv[i]
      vals[#ms] = kv[i + 1]
    end
  end
  local ns = redis.call("HMGET", view.n, unpack(ms))
  local c = st_load(view, ms)
  local V, T = c.v, c.t
  local hset, hdel = {}, {}
  -- st_load keeps ms's order: member i of ms is entry i of the cache.
  for i, m in ipairs(ms) do
    local n = (tonumber(ns[i]) or 0) - 1
    if n <= 0 then
      if ns[i] then hdel[#hdel + 1] = m end
      V[i], T[i] = nil, nil
    else
      hset[#hset + 1] = m
      hset[#hset + 1] = string.format("%d", n)
      if agg == "sum" and V[i] ~= nil then
        local bv = split_vt(vals[i])
        V[i] = V[i] - bv
      end
    end
  end
  if #hset > 0 then redis.call("HSET", view.n, unpack(hset)) end
  if #hdel > 0 then redis.call("HDEL", view.n, unpack(hdel)) end
  st_flush(view, c)
end

-- Evicts the buckets that ended at or before the cutoff, within the budget.
-- `writes`: the call also applies updates (else it only trims: a read, or
-- the background trimmer, which must leave no lasting key behind).
function trim(view, writes)
  local raw = redis.call("GET", view.cut)
  local stored = tonumber(raw or "-1")
  if not writes and redis.call("EXISTS", view.log) == 0 then
    -- Nothing in the window (never written, or expired with its keys):
    -- nothing to evict and nothing to remember. A cut an earlier version
    -- left without expiry goes now.
    if raw and redis.call("PEXPIRETIME", view.cut) == -1 then redis.call("UNLINK", view.cut) end
    view.cutoff = math.max(view.cutoff, stored)
    return
  end
  if view.cutoff > stored then
    -- KEEPTTL: the cut lives as long as the window's data, never longer.
    redis.call("SET", view.cut, num(view.cutoff), "KEEPTTL")
    if not raw then
      local at = redis.call("PEXPIRETIME", view.log)
      if at > 0 then redis.call("PEXPIREAT", view.cut, at) end
    end
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
      if call_evicted >= EVICT_BUDGET then
        evict_more = true
        return
      end
      local page = redis.call("HSCAN", bkey, cursor, "COUNT", 500)
      cursor = page[1]
      local kv = page[2]
      if #kv > 0 then
        -- Sum and last windows evict the page at once.
        if not cfields and not uses_ord then evict_page(view, kv) end
        local fields = {}
        for i = 1, #kv, 2 do
          if cfields then
            cevict(view, kv[i], kv[i + 1], bend)
          elseif uses_ord then
            evict_entry(view, kv[i], kv[i + 1], bend)
          end
          fields[#fields + 1] = kv[i]
          evicted = evicted + 1
          call_evicted = call_evicted + 1
        end
        redis.call("HDEL", bkey, unpack(fields))
      end
    until cursor == "0"
    redis.call("ZREMRANGEBYSCORE", view.log, "-inf", bend)
  end
end

-- One update of a window bucket. Returns 1 applied, 2 overflow, 3 late, 0 no change.
function apply_window(view, m, dv, dt, bend)
  if view.bnum[bend] <= view.cutoff then return 3 end
  local bkey = view.key .. ":b:" .. bend
  local old = redis.call("HGET", bkey, m)
  local bv, bt = nil, nil
  if old then bv, bt = split_vt(old) end
  local nbv, nbt = combine(bv, bt, dv, dt)
  -- The bucket already holds a better value: nothing changes.
  if nbv == nil then return 0 end
  local V, T = get_state(view, m)
  local nv, nt = combine(V, T, dv, dt)
  local summed = agg == "sum"
  if nv ~= nil and out_of_range(summed and V or nil, dv, nv) then return 2 end
  if out_of_range(summed and bv or nil, dv, nbv) then return 2 end
  if not old then
    redis.call("ZADD", view.log, bend, bend)
    if not uses_ord then redis.call("HINCRBY", view.n, m, 1) end
  elseif uses_ord then
    redis.call("ZREM", view.ord, ord_entry(m, bv, bt, bend))
  end
  if uses_ord then
    redis.call("ZADD", view.ord, 0, ord_entry(m, nbv, nbt, bend))
  end
  if agg == "sum" and tie == "n" then
    redis.call("HSET", bkey, m, num(nbv))
  else
    redis.call("HSET", bkey, m, num(nbv) .. "," .. num(nbt))
  end
  if not old then
    -- A day past the bucket's own end of life: trimming, not the TTL,
    -- removes a bucket, and must find it to subtract it. Set after the
    -- HSET: an expiry on a key not yet there is lost.
    redis.call("PEXPIREAT", bkey, tonumber(bend) + view.len + 86400000)
  end
  if nv ~= nil then set_state(view, m, T, nv, nt, V) end
  return 1
end

-- One composite update of a window bucket (fields as in apply_composite):
-- each field combines into the bucket's entry and into the window's K:f
-- by its rule. Returns 1 applied, 2 overflow, 3 late, 0 no change.
function apply_cwindow(view, m, fields, bend)
  if view.bnum[bend] <= view.cutoff then return 3 end
  local bkey = view.key .. ":b:" .. bend
  local oldb = redis.call("HGET", bkey, m)
  local bst = {}
  if oldb then bst = cparse(oldb) end
  local old = redis.call("HGET", view.f, m)
  local st = {}
  if old then st = cparse(old) end
  local nbst, nst = {}, {}
  local bchanged, changed = false, false
  for i = 1, #cfields do
    local bcur, cur = bst[i] or false, st[i] or false
    local u = fields[i]
    if u then
      local dv, dt = u[1], u[2]
      local rule = cfields[i].rule
      local BV, BT, V, T = nil, nil, nil, nil
      if bcur then BV, BT = bcur[1], bcur[2] end
      if cur then V, T = cur[1], cur[2] end
      -- The window's value can change only when the bucket's does (it is
      -- the combination of the buckets).
      local nbv, nbt = combine_rule(rule, BV, BT, dv, dt)
      if nbv ~= nil then
        local nv, nt = combine_rule(rule, V, T, dv, dt)
        -- A sum rounded past 2^53 can land on 2^53 itself: undo it to see.
        for _, x in ipairs({ { nbv, BV }, { nv, V } }) do
          local s, prev = x[1], x[2]
          if s ~= nil and (s > MAX_EXACT or s < -MAX_EXACT
              or (rule == "sum" and prev ~= nil and s - prev ~= dv)) then
            return 2
          end
        end
        if not bcur or nbv ~= bcur[1] or nbt ~= bcur[2] then
          bcur = { nbv, nbt }
          bchanged = true
        end
        if nv ~= nil and (not cur or nv ~= cur[1] or nt ~= cur[2]) then
          cur = { nv, nt }
          changed = true
        end
      end
    end
    nbst[i], nst[i] = bcur, cur
  end
  if not bchanged then return 0 end
  redis.call("HSET", bkey, m, cser(nbst))
  if not oldb then
    redis.call("ZADD", view.log, bend, bend)
    -- As for other windows: trimming, not the TTL, removes a bucket. Set
    -- after the HSET: an expiry on a key not yet there is lost.
    redis.call("PEXPIREAT", bkey, tonumber(bend) + view.len + 86400000)
  end
  for i = 1, #cfields do
    if cuses_ord(i) and nbst[i] and nbst[i] ~= bst[i] then
      if bst[i] then redis.call("ZREM", view.ord, cord_entry(i, m, bst[i], bend)) end
      redis.call("ZADD", view.ord, 0, cord_entry(i, m, nbst[i], bend))
    end
  end
  if changed then cwrite(view, m, old and st or nil, nst) end
  return 1
end
end -- extras

-- Decides, once per view and call, whether this call keeps the view's
-- dense-rank index: only when it is complete (it exists, or the view has
-- no members yet), so an instance that had members before the index was
-- kept never gets a partial one (reads then walk). A board that keeps no
-- index drops any it kept before, which would go stale: when the call
-- sets the view's or the fence's expiry (`fresh`), which a consumer does
-- the first time it writes a key and again once a minute, not in every
-- call.
local function dense_open(view, keep, fresh)
  local vk = view.key .. ":v"
  if not keep then
    if fresh or view.exp ~= 0 then redis.call("UNLINK", vk) end
    return
  end
  if redis.call("EXISTS", vk) == 1 then
    view.v = vk
  elseif redis.call("EXISTS", view.key) == 0 then
    view.v = vk
    view.vnew = true
  end
end

-- An index this call started takes the view's expiry, whatever the call
-- was told (expire_at 0 leaves an existing key's expiry alone, and an
-- archived period has none until the archiver gives it one).
local function dense_close(view)
  if not view.vnew then return end
  local at = redis.call("PEXPIRETIME", view.key)
  if at > 0 then redis.call("PEXPIREAT", view.v, at) end
end

-- Fences and expiry of an instance.
local function finish(inst)
  if inst.ngroups == 0 then return end
  local fence_args = {}
  for g = 0, inst.ngroups - 1 do
    fence_args[#fence_args + 1] = ARGV[inst.groups + g * 3]
    fence_args[#fence_args + 1] = ARGV[inst.groups + g * 3 + 2]
  end
  for _, x in ipairs(inst.bounds or {}) do fence_args[#fence_args + 1] = x end
  redis.call("HSET", inst.fence, unpack(fence_args))
  for _, view in ipairs(inst.views) do
    if view.exp > 0 then
      if view.kind == "p" then
        -- A period's expiry is fixed by its end: set it as is.
        redis.call("PEXPIREAT", view.key, view.exp)
        if needs_t then redis.call("PEXPIREAT", view.t, view.exp) end
        if view.f then redis.call("PEXPIREAT", view.f, view.exp) end
        if view.v then redis.call("PEXPIREAT", view.v, view.exp) end
      else
        expire_at(view.key, view.exp)
        if needs_t then expire_at(view.t, view.exp) end
        if view.f then expire_at(view.f, view.exp) end
        expire_at(view.log, view.exp)
        if view.n then expire_at(view.n, view.exp) end
        expire_at(view.cut, view.exp)
        if uses_ord then expire_at(view.ord, view.exp) end
        if view.v then expire_at(view.v, view.exp) end
      end
    end
  end
  if inst.fence_expire < 0 then
    redis.call("PERSIST", inst.fence)
  elseif inst.fence_expire > 0 then
    expire_at(inst.fence, inst.fence_expire)
  end
end


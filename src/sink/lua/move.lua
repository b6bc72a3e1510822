-- rankflow: hide, restore, erase or look up one member in board instances
-- (docs/moderation.md), joined after state.lua and run by apply.lua when
-- ARGV[2] is "move" (src/admin/members.rs sends it). Every view K of an
-- instance has a twin K~h (the same key with "~h" after the hash tag, so
-- the same slot) that holds the members hidden from it, with the same
-- helper keys, written by the apply script exactly as K is: hiding moves a
-- member's state from K to its twin, restoring moves it back, erasing
-- removes it from both. A move goes through the apply script's own writes
-- (set_state, apply_window, cwrite...), so the dense-rank index, window
-- buckets, bucket counts and best-bucket indexes stay exact, and a member
-- found on both sides (events that reached the twin while the move was
-- under way) is combined by the board's aggregate, as a batch would be.
--
-- KEYS, per instance: fence hash, then per view its keys as apply.lua binds
--   them (no K:closed), then the same for its twin.
-- ARGV  now, "move", action ("hide" | "restore" | "erase" | "show"),
--       member, stamp, ninstances, then per instance:
--       agg, tie (as apply.lua), nviews, {"p" | "w", window length ms} x nviews
-- Reply {more, {found} x ninstances}: found = per view 0 (absent), 1 (in
--       K), 2 (in its twin), 3 (both), as held before the action; more = 1
--       when a window's trimming stopped at its budget (the caller sends the
--       action again: it is idempotent).
--
-- Before anything moves, both sides of a window are trimmed to the cutoff,
-- so a hidden member's window has slid meanwhile and the two sides hold
-- the same live buckets. Every action but "show" raises the fence hash's
-- "~mod" to `stamp`: from then on an apply call encoded with an older
-- moderation generation is refused (apply.lua), so no consumer that has
-- not yet heard of the action writes the member where it no longer is.

-- Defined only in calls that move (state.lua, `extras`); the helpers are
-- locals of this block.
local move_member
if extras then
-- A member's entries in a window's live buckets: {bucket end, entry text}.
local function window_entries(view, m)
  local out = {}
  for _, bend in ipairs(redis.call("ZRANGEBYSCORE", view.log, "(" .. num(view.cutoff), "+inf")) do
    local e = redis.call("HGET", view.key .. ":b:" .. bend, m)
    if e then out[#out + 1] = { bend, e } end
  end
  return out
end

-- Takes a member out of a window: its bucket entries, best-bucket index
-- entries, bucket count and state.
local function window_drop(view, m, entries)
  for _, e in ipairs(entries) do
    local bend, text = e[1], e[2]
    redis.call("HDEL", view.key .. ":b:" .. bend, m)
    if cfields then
      local bst = cparse(text)
      for i = 1, #cfields do
        if cuses_ord(i) and bst[i] then redis.call("ZREM", view.ord, cord_entry(i, m, bst[i], bend)) end
      end
    elseif uses_ord then
      local bv, bt = split_vt(text)
      redis.call("ZREM", view.ord, ord_entry(m, bv, bt, bend))
    end
  end
  if view.n then redis.call("HDEL", view.n, m) end
  if cfields then
    local old = redis.call("HGET", view.f, m)
    if old then cwrite(view, m, cparse(old), nil) end
  else
    remove_state(view, m)
  end
end

-- Adds a member's bucket entries to a window, each as one update of its
-- bucket would.
local function window_add(view, m, entries)
  for _, e in ipairs(entries) do
    local bend, text = e[1], e[2]
    view.bnum[bend] = tonumber(bend)
    if cfields then
      local bst = cparse(text)
      local fields = {}
      for i = 1, #cfields do fields[i] = bst[i] or false end
      apply_cwindow(view, m, fields, bend)
    else
      local v, t = split_vt(text)
      apply_window(view, m, v, t, bend)
    end
  end
end

-- Whether a period view holds the member.
local function period_has(view, m)
  if cfields then return redis.call("HEXISTS", view.f, m) == 1 end
  return get_state(view, m) ~= nil
end

-- Moves a member's state from one period view to another (dst nil: drops it).
local function period_move(src, dst, m)
  if cfields then
    local old = redis.call("HGET", src.f, m)
    if not old then return end
    local st = cparse(old)
    if dst then
      local fields = {}
      for i = 1, #cfields do fields[i] = st[i] or false end
      apply_composite(dst, m, fields)
    end
    cwrite(src, m, st, nil)
    return
  end
  local v, t = get_state(src, m)
  if v == nil then return end
  if dst then
    local V, T = get_state(dst, m)
    local nv, nt = combine(V, T, v, t)
    if nv ~= nil then set_state(dst, m, T, nv, nt, V) end
  end
  remove_state(src, m)
end

-- The keys of a view that live as long as it: what a new twin copies the
-- expiry of.
local function lasting_keys(view)
  local out = { view.key }
  for _, name in ipairs({ "t", "f", "log", "n", "ord", "cut" }) do
    if view[name] then out[#out + 1] = view[name] end
  end
  return out
end

-- Gives dst's keys src's expiry (the two sides of a view live alike; an
-- archived period waiting for the archiver has none).
local function copy_expiry(src_at, dst)
  if src_at <= 0 then return end
  for _, key in ipairs(lasting_keys(dst)) do
    if redis.call("EXISTS", key) == 1 then expire_at(key, src_at) end
  end
end

-- Binds one view's keys from KEYS[k...] as apply.lua does; returns the view
-- and the next key index.
local function bind_view(kind, len, k, inst)
  local view = { kind = kind, key = KEYS[k], bnum = {} }
  k = k + 1
  if inst.needs_t then view.t = KEYS[k]; k = k + 1 end
  if inst.cfields then view.f = KEYS[k]; k = k + 1 end
  if kind == "w" then
    view.cutoff = now - len
    view.len = len
    view.log = KEYS[k]; k = k + 1
    if not inst.cfields then view.n = KEYS[k]; k = k + 1 end
    if inst.uses_ord then view.ord = KEYS[k]; k = k + 1 end
    view.cut = KEYS[k]; k = k + 1
  end
  return view, k
end

local function parse_rules(inst, code)
  inst.needs_t = (inst.tie ~= "n") or (code == "last")
  inst.uses_ord = (code == "max") or (code == "min")
  if string.sub(code, 1, 1) == "c" then
    local rules = { s = "sum", x = "max", n = "min", l = "last" }
    inst.cfields = {}
    for j = 2, #code - 1, 2 do
      inst.cfields[#inst.cfields + 1] = {
        rule = rules[string.sub(code, j, j)],
        comp = string.sub(code, j + 1, j + 1) == "c",
      }
    end
    inst.cdir = string.sub(code, -1)
    inst.uses_ord = false
    for _, f in ipairs(inst.cfields) do
      if f.rule == "max" or f.rule == "min" then inst.uses_ord = true end
    end
    inst.needs_t = false
  end
end

function move_member()
  local action, m, stamp = ARGV[3], ARGV[4], tonumber(ARGV[5])
  local a, k = 7, 1
  local reply = { 0 }
  for _ = 1, tonumber(ARGV[6]) do
    local inst = { agg = ARGV[a], tie = string.sub(ARGV[a + 1], 1, 1), fence = KEYS[k] }
    inst.dense = string.sub(ARGV[a + 1], 2, 2) ~= "-"
    parse_rules(inst, inst.agg)
    agg, tie, needs_t, uses_ord = inst.agg, inst.tie, inst.needs_t, inst.uses_ord
    cfields, cdir = inst.cfields, inst.cdir
    k = k + 1
    local nviews = tonumber(ARGV[a + 2])
    a = a + 3
    local specs = {}
    for v = 1, nviews do
      specs[v] = { ARGV[a], tonumber(ARGV[a + 1]) }
      a = a + 2
    end
    local reals, twins = {}, {}
    for v = 1, nviews do reals[v], k = bind_view(specs[v][1], specs[v][2], k, inst) end
    for v = 1, nviews do twins[v], k = bind_view(specs[v][1], specs[v][2], k, inst) end
    evicted, evict_more = 0, false
    local found = {}
    for v = 1, nviews do
      local real, twin = reals[v], twins[v]
      dense_open(real, inst.dense, true)
      dense_open(twin, inst.dense, true)
      local held, rentries, tentries = 0, nil, nil
      if real.kind == "w" then
        trim(real, false)
        trim(twin, false)
        rentries, tentries = window_entries(real, m), window_entries(twin, m)
        if #rentries > 0 then held = held + 1 end
        if #tentries > 0 then held = held + 2 end
      else
        if period_has(real, m) then held = held + 1 end
        if period_has(twin, m) then held = held + 2 end
      end
      found[v] = held
      local src, dst, entries
      if action == "hide" and held % 2 == 1 then
        src, dst, entries = real, twin, rentries
      elseif action == "restore" and held >= 2 then
        src, dst, entries = twin, real, tentries
      end
      if src then
        local at = redis.call("PEXPIRETIME", src.key)
        if src.kind == "w" then
          window_add(dst, m, entries)
          window_drop(src, m, entries)
        else
          period_move(src, dst, m)
        end
        copy_expiry(at, dst)
      elseif action == "erase" then
        if real.kind == "w" then
          window_drop(real, m, rentries)
          window_drop(twin, m, tentries)
        else
          period_move(real, nil, m)
          period_move(twin, nil, m)
        end
      end
      dense_close(real)
      dense_close(twin)
    end
    if action ~= "show" then
      local cur = tonumber(redis.call("HGET", inst.fence, "~mod") or "-1")
      if cur < stamp then
        local existed = redis.call("EXISTS", inst.fence) == 1
        redis.call("HSET", inst.fence, "~mod", stamp)
        -- A stamp on an instance with no data yet guards it against
        -- consumers with an older moderation generation for a day, far
        -- longer than a batch can be in flight; the apply script's first
        -- write gives the fence hash its own expiry.
        if not existed then redis.call("PEXPIRE", inst.fence, 86400000) end
      end
    end
    if evict_more then reply[1] = 1 end
    reply[#reply + 1] = found
  end
  return reply
end
end -- extras

-- rankflow: apply one batch's updates to board instances, atomically with
-- their offset fences. A board instance (board + scope) is one hash tag,
-- hence one Redis Cluster slot; one call carries one or more instances of
-- the same slot (on a single node, of any slot), so a batch needs few calls.
--
-- With no groups an instance is only trimmed (the background trimmer and
-- trim-on-read use that). The argument layout is written by
-- src/sink/encode.rs; docs/exactly-once.md and docs/redis-layout.md describe
-- the data it keeps.
--
-- KEYS, per instance:
--   fence hash: "<topic>/<partition>" -> highest applied offset
--   per view, in order:
--     period: K [, K:t]
--     archived period: K [, K:t], K:closed
--     window: K [, K:t], K:log, K:n [, K:ord], K:cut
--     composite window: K, K:f, K:log [, K:ord], K:cut (no K:n)
--   (K:t when tie != "n" or agg == "last", never for composite boards;
--    K:f for composite boards, right after K [, K:t]; K:ord for max/min,
--    on composite boards when any field is max or min)
-- ARGV  now, modgen, ninstances ("x<n>" when an instance has a window view
--       or a composite rule: state.lua's `extras`), then per instance:
--       agg, tie, fence_expire, ngroups, {field, lo, hi} x ngroups,
--       nviews, {"p" | "a", expire_at, absum, bound_field
--                | "w", expire_at, cutoff} x nviews,
--       (absum: sum of |delta| of the view's updates; bound_field: "~abs:<kind>"
--        for plain sums, "" otherwise)
--       ("a": a period of an archived view, expire_at always 0: the archiver
--        sets its expiry once the period is copied. When its K:closed marker
--        exists, the archiver has closed it: none of its updates is applied,
--        all count as late, and its cutoff in the reply is -2)
--       (expire_at / fence_expire: absolute ms; 0 = leave the expiry alone,
--        the caller set it recently; fence_expire -1 = persist)
--       then for each view one packed argument holding all its updates
--       (updates of all groups merged per member: a batch's partitions are
--        applied together or not at all), read with Redis's `struct`
--       library: little-endian, "I4" a 4-byte count or index, "c0" the
--       bytes counted by the I4 before it, "d" an IEEE double:
--         windows first list their bucket ends: I4 nb, {I4 c0 (decimal
--         text of the end)} x nb; then per update, to the argument's end:
--         member I4 c0, value d [, time d] [, bucket I4 (1-based, into the
--         ends)]
--       (time unless the instance is a plain sum: agg "sum", tie "n", no
--        window; bucket for windows). Composite boards (docs/score-encoding.md; agg "c"
--       .. {rule, code} x nfields .. direction, e.g. "csdsanpa"... see
--       src/board/layout.rs `script_code`): per update member I4 c0,
--       then per field a byte B (0: the event gave it no value; 1: value d,
--       time d follow) [, bucket I4].
--       (One argument per view rather than one per value: Redis turns
--        every argument into a Lua string and `tonumber` parses each
--        number again, most of the script's cost per update (issue 14).)
--
-- Reply {1, more, {applied, evicted, overflow, late, cutoffs} x ninstances}
--       (cutoffs: when late > 0, the cutoff each view used, in view order,
--        -1 for open periods, -2 for closed ones, so the caller can tell
--        which events were late; otherwise empty)
--    or {0, {instance, field, fence} x conflicts} when groups reach their
--       fence (already applied, in part or in full); then nothing at all
--       was written.
--    or {2, stamp} when an instance with groups carries a moderation stamp
--       (its fence hash's "~mod" field, set by move.lua when a member is
--       hidden, restored or erased) above modgen, the moderation generation
--       the call was encoded with: the caller's view of who is hidden is
--       older than the instance's, so nothing was written and the caller
--       reloads it and encodes the call again. modgen -1: not checked.
--       On a single node modgen may be written "r<modgen>": then the last
--       KEY is the fleet's moderation record, and a "~gen" there above
--       modgen refuses the call the same way (the consumer then sends its
--       member-index registrations in the same pipeline, just before).
--
-- ARGV[2] "move" runs move.lua instead (hide, restore, erase one member).

-- Pass 1: parse every instance and read its fences. A group whose offsets
-- reach its fence (already applied in part or in full) is reported, and
-- then nothing at all is written: the caller resends the instance without
-- the applied offsets.
if ARGV[2] == "move" then return move_member() end
local modgen_arg = ARGV[2]
local record_key = nil
if string.sub(modgen_arg, 1, 1) == "r" then
  record_key = KEYS[#KEYS]
  modgen_arg = string.sub(modgen_arg, 2)
end
local modgen = tonumber(modgen_arg)
local instances = {}
local conflicts = {}
local moderated = nil
local a = 4
local k = 1
for i = 1, tonumber(string.match(ARGV[3], "%d+")) do
  local inst = { agg = ARGV[a], tie = string.sub(ARGV[a + 1], 1, 1), fence_expire = tonumber(ARGV[a + 2]), fence = KEYS[k] }
  -- A tie code followed by "-": the board keeps no dense-rank index.
  inst.dense = string.sub(ARGV[a + 1], 2, 2) ~= "-"
  inst.needs_t = (inst.tie ~= "n") or (inst.agg == "last")
  inst.uses_ord = (inst.agg == "max") or (inst.agg == "min")
  local plain = (inst.agg == "sum") and (inst.tie == "n")
  if string.sub(inst.agg, 1, 1) == "c" then
    local rules = { s = "sum", x = "max", n = "min", l = "last" }
    inst.cfields = {}
    for j = 2, #inst.agg - 1, 2 do
      inst.cfields[#inst.cfields + 1] = {
        rule = rules[string.sub(inst.agg, j, j)],
        comp = string.sub(inst.agg, j + 1, j + 1) == "c",
      }
    end
    inst.cdir = string.sub(inst.agg, -1)
    inst.uses_ord = false
    for _, f in ipairs(inst.cfields) do
      if f.rule == "max" or f.rule == "min" then inst.uses_ord = true end
    end
    inst.needs_t = false
    plain = false
  end
  k = k + 1
  local ngroups = tonumber(ARGV[a + 3])
  a = a + 4
  inst.groups = a
  inst.ngroups = ngroups
  a = a + ngroups * 3
  local nviews = tonumber(ARGV[a]); a = a + 1
  local views = {}
  -- bound field -> sum of |delta| this call adds under it
  local bounds = {}
  for v = 1, nviews do
    local view = { kind = ARGV[a], exp = tonumber(ARGV[a + 1]), key = KEYS[k] }
    a = a + 2
    k = k + 1
    if inst.needs_t then view.t = KEYS[k]; k = k + 1 end
    if inst.cfields then view.f = KEYS[k]; k = k + 1 end
    if view.kind == "a" then
      -- An archived period is a period with a closed marker to check.
      view.closed = KEYS[k]; k = k + 1
      view.kind = "p"
    end
    if view.kind == "p" then
      local absum, field = tonumber(ARGV[a]), ARGV[a + 1]
      a = a + 2
      if field ~= "" then
        view.bound = field
        bounds[field] = (bounds[field] or 0) + absum
      end
    else
      plain = false
      view.cutoff = tonumber(ARGV[a]); a = a + 1
      view.len = now - view.cutoff
      if inst.cfields then
        -- Composite windows count nothing per member: see cevict.
        view.log = KEYS[k]; k = k + 1
      else
        view.log = KEYS[k]; view.n = KEYS[k + 1]; k = k + 2
      end
      if inst.uses_ord then view.ord = KEYS[k]; k = k + 1 end
      view.cut = KEYS[k]; k = k + 1
    end
    views[v] = view
  end
  -- A plain sum's updates carry no event time; windows add the bucket.
  inst.with_t = not plain
  inst.views = views
  -- One read for the fences and the bounds.
  local fields = {}
  for g = 1, ngroups do fields[g] = ARGV[inst.groups + (g - 1) * 3] end
  local bound_fields = {}
  for field, _ in pairs(bounds) do
    bound_fields[#bound_fields + 1] = field
    fields[#fields + 1] = field
  end
  -- Calls that route members (they have groups) check the moderation stamp.
  local checks_mod = ngroups > 0 and modgen >= 0
  if checks_mod then fields[#fields + 1] = "~mod" end
  if #fields > 0 then
    local got = redis.call("HMGET", inst.fence, unpack(fields))
    if checks_mod then
      local stamp = tonumber(got[#fields] or "-1")
      if stamp > modgen then moderated = math.max(moderated or stamp, stamp) end
    end
    for g = 1, ngroups do
      local f = got[g]
      if f and tonumber(ARGV[inst.groups + (g - 1) * 3 + 1]) <= tonumber(f) then
        conflicts[#conflicts + 1] = i
        conflicts[#conflicts + 1] = fields[g]
        conflicts[#conflicts + 1] = tonumber(f)
      end
    end
    -- New bounds, and which of them still allow unchecked sums.
    inst.bounds = {}
    inst.fast = {}
    for j, field in ipairs(bound_fields) do
      local old = got[ngroups + j]
      local bound
      if old then
        bound = tonumber(old)
      else
        -- No bound yet: a new view kind has no keys, so it starts at 0;
        -- but a key written without a bound (the field was lost) proves
        -- nothing, and then every total of the kind is checked.
        bound = 0
        for _, view in ipairs(views) do
          if view.bound == field and redis.call("EXISTS", view.key) == 1 then
            bound = BOUND_LIMIT + 1
          end
        end
      end
      bound = bound + bounds[field]
      inst.bounds[#inst.bounds + 1] = field
      inst.bounds[#inst.bounds + 1] = num(bound)
      inst.fast[field] = bound <= BOUND_LIMIT
    end
  end
  -- Updates start here, one packed argument per view; skip over them.
  inst.updates = a
  a = a + nviews
  instances[i] = inst
end
if record_key then
  local gen = tonumber(redis.call("HGET", record_key, "~gen") or "0")
  if gen > modgen then moderated = math.max(moderated or gen, gen) end
end
if moderated then return { 2, moderated } end
if #conflicts > 0 then
  local reply = { 0 }
  for _, c in ipairs(conflicts) do reply[#reply + 1] = c end
  return reply
end

-- Pass 2: apply.
local more = 0
local reply = { 1, 0 }
for i = 1, #instances do
  local inst = instances[i]
  agg, tie, needs_t, uses_ord = inst.agg, inst.tie, inst.needs_t, inst.uses_ord
  cfields, cdir = inst.cfields, inst.cdir
  evicted = 0
  evict_more = false
  local views = inst.views
  for v = 1, #views do
    local view = views[v]
    dense_open(view, inst.dense, inst.fence_expire ~= 0)
    if view.kind == "w" then
      trim(view, inst.ngroups > 0)
    elseif view.bound then
      view.fast = inst.fast[view.bound]
    end
  end
  local applied, overflow, late = 0, 0, 0
  a = inst.updates
  local nfields = cfields and #cfields
  for v = 1, #views do
    local view = views[v]
    local arg = ARGV[a]
    a = a + 1
    if view.closed and #arg > 0 and redis.call("EXISTS", view.closed) == 1 then
      -- Closed by the archiver, which may be reading the final standings:
      -- one look per view and call, and none of its updates is applied.
      view.cutoff = CLOSED
      late = late + decode(view, arg, inst.with_t, nfields).n
    elseif view.fast and not view.v then
      -- The hot path: a plain sum far from the exact limit, added to as
      -- its packed argument is read.
      applied = applied + add_packed(view, arg, inst.with_t)
    else
      local U = decode(view, arg, inst.with_t, nfields)
      local count = U.n
      if view.fast then
        -- The same with a dense-rank index to keep.
        for from = 1, count, CHUNK do
          local to = math.min(from + CHUNK - 1, count)
          applied = applied + apply_fast_chunk(view, U, from, to)
        end
      elseif view.kind == "w" and not cfields and not uses_ord then
        for from = 1, count, CHUNK do
          local to = math.min(from + CHUNK - 1, count)
          local n, o, l = apply_window_chunk(view, U, from, to)
          applied, overflow, late = applied + n, overflow + o, late + l
        end
      elseif view.kind == "p" and not cfields then
        for from = 1, count, CHUNK do
          local to = math.min(from + CHUNK - 1, count)
          local n, o = apply_period_chunk(view, U, from, to)
          applied, overflow = applied + n, overflow + o
        end
      else
        for u = 1, count do
          local m = U.m[u]
          local r
          if cfields and view.kind == "w" then
            r = apply_cwindow(view, m, U.f[u], U.b[u])
          elseif cfields then
            r = apply_composite(view, m, U.f[u])
          else
            r = apply_window(view, m, U.v[u], U.t[u], U.b[u])
          end
          if r == 1 then applied = applied + 1
          elseif r == 2 then overflow = overflow + 1
          elseif r == 3 then late = late + 1 end
        end
      end
    end
  end
  for v = 1, #views do dense_close(views[v]) end
  finish(inst)
  reply[#reply + 1] = applied
  reply[#reply + 1] = evicted
  reply[#reply + 1] = overflow
  reply[#reply + 1] = late
  local cutoffs = {}
  if late > 0 then
    for v = 1, #views do cutoffs[v] = views[v].cutoff or -1 end
  end
  reply[#reply + 1] = cutoffs
  if evict_more then more = 1 end
end
reply[2] = more
return reply

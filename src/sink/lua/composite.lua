-- rankflow Lua prelude, joined in front of apply.lua and of the read
-- script (src/reader/ranks.lua): the one copy of how a member is stored,
-- so that the read script finds composite and tie-break members exactly
-- as the apply script wrote them. It defines locals only; the script after
-- it sets `tie` (and for composite boards `cfields`, `cdir`) before calling
-- the encoders.

-- Tie-break code of the board being handled: "n", "a" or "d".
local tie
-- Composite boards: per field {rule = "sum"|..., comp = bool}, and the
-- listing direction ("d" or "a"); nil for other boards.
local cfields, cdir

local MAX_EXACT = 9007199254740992  -- 2^53: larger magnitudes are not exact in a double
local MAXT = 281474976710655        -- 2^48 - 1: tie keys are 12 hex digits
-- A double as text that reads back exactly. Whole numbers below 10^15
-- (nearly every score: counts and coin totals) take "%d", the same digits
-- "%.17g" prints for them, at a fraction of its cost: "%.17g" goes through
-- libc's arbitrary-precision float printing, about a tenth of Redis's CPU in
-- the window workload (issue 14). Zero keeps "%.17g" for its sign ("-0").
-- Whole numbers are memoised for the script run: an event's time is
-- printed for K:t, the bucket entry and the tie key of every view it
-- updates. (Zero, whose sign a table key would lose, is never memoised.)
local format = string.format
local num_memo = {}
local function num(s)
  if s > -1e15 and s < 1e15 and s % 1 == 0 and s ~= 0 then
    local r = num_memo[s]
    if not r then
      r = format("%d", s)
      num_memo[s] = r
    end
    return r
  end
  return format("%.17g", s)
end

-- Members of tie-break boards carry a 12-hex-digit tie key in front, so that
-- Redis's lexicographic order among equal scores is the tie-break order while
-- the score stays the exact value.
local hex_memo = {}
local function enc(m, t)
  if tie == "n" then return m end
  local k = t
  if tie == "d" then k = MAXT - t end
  local h = hex_memo[k]
  if not h then
    h = format("%012x", k)
    hex_memo[k] = h
  end
  return h .. m
end

-- Composite boards (src/board/layout.rs has the same encoding): the
-- score is the first field (an infinity listing last when it has no
-- value); the member is prefixed by a 15-hex-digit code per further field
-- (sign digit 1 or 2, then 14 digits of 2^53+v or of v: no double above
-- 2^53 is ever needed), complemented where the field's order differs from
-- the listing direction, "missing" being the code listed last; then the
-- tie key (time of the latest field change) as for other boards.
local COMPL = { ["0"] = "f", ["1"] = "e", ["2"] = "d", ["3"] = "c", ["4"] = "b", ["5"] = "a",
  ["6"] = "9", ["7"] = "8", ["8"] = "7", ["9"] = "6", a = "5", b = "4", c = "3", d = "2",
  e = "1", f = "0" }

local function ccode(i, f)
  if not f then
    if cdir == "d" then return "000000000000000" end
    return "fffffffffffffff"
  end
  local v = f[1]
  local s
  if v < 0 then
    s = "1" .. string.format("%014x", MAX_EXACT + v)
  else
    s = "2" .. string.format("%014x", v)
  end
  if cfields[i].comp then s = (string.gsub(s, "%x", COMPL)) end
  return s
end

local function cenc(m, st)
  local parts = {}
  local t = 0
  for i = 1, #cfields do
    if i > 1 then parts[#parts + 1] = ccode(i, st[i]) end
    if st[i] and st[i][2] > t then t = st[i][2] end
  end
  parts[#parts + 1] = enc(m, t)
  return table.concat(parts)
end

local function cscore(st)
  if st[1] then return num(st[1][1]) end
  if cdir == "d" then return "-inf" end
  return "+inf"
end

-- K:f text: per field "value:time" or "", joined by ";".
local function cparse(s)
  local st = {}
  local i = 1
  for part in string.gmatch(s .. ";", "([^;]*);") do
    if part ~= "" then
      local c = string.find(part, ":", 1, true)
      st[i] = { tonumber(string.sub(part, 1, c - 1)), tonumber(string.sub(part, c + 1)) }
    else
      st[i] = false
    end
    i = i + 1
  end
  return st
end

local function cser(st)
  local parts = {}
  for i = 1, #cfields do
    if st[i] then parts[i] = num(st[i][1]) .. ":" .. num(st[i][2]) else parts[i] = "" end
  end
  return table.concat(parts, ";")
end

-- Dense-rank index (K:v): one entry per distinct value of a view, listed
-- in the board's order, so a value's dense rank is its rank there plus
-- one. An entry's member is the value's tie group (composite boards: the
-- codes of the fields after the first, "" otherwise) followed by the
-- score's text; its score is the score. Entries of one score differ only
-- in their fixed-length codes, so they sort exactly as the board's
-- members of that score do.

-- Score text of an index entry (infinities as Redis prints them; -0 and
-- 0 are one value, as they are one score to Redis).
local function vtext(x)
  if x == math.huge then return "inf" end
  if x == -math.huge then return "-inf" end
  if x == 0 then return "0" end
  return num(x)
end

-- A score as Redis prints it, to a number ("inf" included).
local function rnum(s)
  if s == "inf" or s == "+inf" then return math.huge end
  if s == "-inf" then return -math.huge end
  return tonumber(s)
end

-- Score of a composite state, as a number.
local function cscore_num(st)
  if st[1] then return st[1][1] end
  if cdir == "d" then return -math.huge end
  return math.huge
end

-- Length of the codes in front of a composite member (fields 2..n).
local function ccodes_len()
  return 15 * (#cfields - 1)
end

-- Index entry of a stored member with score x: the tie group for
-- composite boards, then the score's text.
local function ventry(stored, x)
  if cfields then return string.sub(stored, 1, ccodes_len()) .. vtext(x) end
  return vtext(x)
end

-- Parses a composite board's script code ("c" .. {rule, comp} x n ..
-- direction, see src/board/layout.rs `script_code`) into cfields/cdir.
local function cspec(code)
  local rules = { s = "sum", x = "max", n = "min", l = "last" }
  local fields = {}
  for j = 2, #code - 1, 2 do
    fields[#fields + 1] = {
      rule = rules[string.sub(code, j, j)],
      comp = string.sub(code, j + 1, j + 1) == "c",
    }
  end
  return fields, string.sub(code, -1)
end

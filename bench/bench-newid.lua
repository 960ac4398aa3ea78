-- wrk script: every request carries a call id never sent before, so that
-- records and duplicate suppression do the work of a fresh call each time.
--   wrk ... -s bench/bench-newid.lua -- <run prefix> [<traceparent>]
--
-- With a traceparent, every request carries it too (the otel variant).
--
-- The request is formatted once, around a mark where the id goes: a
-- request() that calls wrk.format for each call costs wrk's thread more
-- than the gateway's worker spends on some variants, and wrk shares its
-- CPU with Redis and the backend.

local prefix = "bench"
local n = 0
local head, tail

function init(args)
    if args[1] ~= nil then
        prefix = args[1]
    end

    local headers = { ["X-Call-Id"] = "\0" }

    if args[2] ~= nil then
        headers["traceparent"] = args[2]
    end

    local req = wrk.format(nil, nil, headers)
    local at = req:find("\0", 1, true)

    head = req:sub(1, at - 1) .. prefix .. "-"
    tail = req:sub(at + 1)
end

function request()
    n = n + 1
    return head .. n .. tail
end

-- wrk script: each connection waits DELAY ms between its calls, so that
-- every variant gets the same offered load (connections / DELAY ms) and
-- the latencies compare at that load, not at saturation.  With PREFIX,
-- every call carries a call id never sent before (see bench-newid.lua).
--   wrk ... -s util/bench-paced.lua -- <delay ms> [<prefix>]

local pause = 1
local prefix = nil
local n = 0

function init(args)
    if args[1] ~= nil then
        pause = tonumber(args[1])
    end
    prefix = args[2]
end

function delay()
    return pause
end

function request()
    if prefix == nil then
        return wrk.format(nil, nil, nil)
    end

    n = n + 1
    return wrk.format(nil, nil, { ["X-Call-Id"] = prefix .. "-" .. n })
end

-- wrk script: each connection waits DELAY ms between its calls, so that
-- every variant gets the same offered load (connections / DELAY ms) and
-- the latencies compare at that load, not at saturation.  With PREFIX,
-- every call carries a call id never sent before, from bench-newid.lua,
-- whose request() this script takes over.
--   wrk ... -s bench/bench-paced.lua -- <delay ms> [<prefix>]

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or ""
dofile(here .. "bench-newid.lua")

local newid_init, newid_request = init, request
local pause = 1
local plain

function init(args)
    if args[1] ~= nil then
        pause = tonumber(args[1])
    end

    if args[2] ~= nil then
        newid_init({ args[2] })
    else
        plain = wrk.format(nil, nil, nil)
    end
end

function delay()
    return pause
end

function request()
    return plain or newid_request()
end

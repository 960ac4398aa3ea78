-- wrk script: every request carries a call id never sent before, so that
-- records and duplicate suppression do the work of a fresh call each time.
--   wrk ... -s util/bench-newid.lua -- <run prefix>

local prefix = "bench"
local n = 0

function init(args)
    if args[1] ~= nil then
        prefix = args[1]
    end
end

function request()
    n = n + 1
    return wrk.format(nil, nil,
                      { ["X-Call-Id"] = prefix .. "-" .. n })
end

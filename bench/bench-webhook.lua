-- wrk script: a 4 KB JSON webhook delivery with an event id never sent
-- before, POSTed; the same bytes for both variants it serves:
--   wrk ... -s bench/bench-webhook.lua -- <run prefix> header|body
-- "header": the id in X-Call-Id too (a dedupe route reads it there);
-- "body": the id only in the body's top-level "id" (idem_call_id_json).
-- As bench-newid.lua, the request is formatted once around a mark where
-- the id goes, as wide as the id (12 digits): Content-Length holds.

local prefix = "bench"
local n = 0
local parts

function init(args)
    if args[1] ~= nil then
        prefix = args[1]
    end

    local mark = string.rep("\0", 12)
    local id = prefix .. "-" .. mark
    local head = '{"id":"' .. id .. '","object":"event",'
                 .. '"type":"charge.succeeded","data":{"object":{"pad":"'
    local tail = '"}},"livemode":false,"pending_webhooks":1}'

    -- 4096 bytes
    local pad = 4096 - #head - #tail
    local body = head .. string.rep("x", pad) .. tail

    local headers = { ["Content-Type"] = "application/json" }
    if args[2] == "header" then
        headers["X-Call-Id"] = id
    end

    local req = wrk.format("POST", nil, headers, body)

    parts = {}
    local from = 1
    while true do
        local at = req:find(mark, from, true)
        if at == nil then
            break
        end
        parts[#parts + 1] = req:sub(from, at - 1)
        from = at + #mark
    end
    parts[#parts + 1] = req:sub(from)
end

function request()
    n = n + 1
    local id = string.format("%012d", n)
    return table.concat(parts, id)
end

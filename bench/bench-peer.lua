-- The OpenResty peer of "make bench": duplicate suppression done the
-- common way in Lua, to compare the module's dedupe against.  A call id
-- is claimed with SET NX; a duplicate reads the key with GET (a stored
-- answer is replayed, else 409); the owner's answer is stored from a
-- timer after the request.  A minimal RESP client on cosockets (Debian
-- ships no lua-resty-redis).

local _M = {}

local function command(sock, ...)
    local args = { ... }
    local out = { "*", #args, "\r\n" }

    for _, a in ipairs(args) do
        a = tostring(a)
        out[#out + 1] = "$" .. #a .. "\r\n" .. a .. "\r\n"
    end

    local ok, err = sock:send(table.concat(out))
    if not ok then
        return nil, err
    end

    local line
    line, err = sock:receive("*l")
    if not line then
        return nil, err
    end

    local c = line:sub(1, 1)

    if c == "+" or c == ":" then
        return line:sub(2)
    end

    if c == "$" then
        local n = tonumber(line:sub(2))
        if n < 0 then
            return ngx.null
        end

        local data
        data, err = sock:receive(n + 2)
        if not data then
            return nil, err
        end

        return data:sub(1, n)
    end

    return nil, line
end

local function connect()
    local sock = ngx.socket.tcp()
    sock:settimeout(1000)

    local ok, err = sock:connect("127.0.0.1", tonumber(ngx.var.bench_redis))
    if not ok then
        return nil, err
    end

    return sock
end

function _M.claim()
    local id = ngx.var.http_x_call_id
    if id == nil then
        return ngx.exit(400)
    end

    local sock, err = connect()
    if not sock then
        ngx.log(ngx.ERR, "redis: ", err)
        return ngx.exit(503)
    end

    local key = "peer:" .. id
    local res
    res, err = command(sock, "SET", key, "P", "PX", 65000, "NX")

    if res == "OK" then
        sock:setkeepalive(10000, 64)
        ngx.ctx.owner = key
        ngx.ctx.body = {}
        return
    end

    res, err = command(sock, "GET", key)
    sock:setkeepalive(10000, 64)

    if type(res) == "string" and res:sub(1, 1) == "A" then
        local nl = res:find("\n", 1, true)
        ngx.status = tonumber(res:sub(2, nl - 1))
        ngx.header["Idempotent-Replayed"] = "true"
        ngx.print(res:sub(nl + 1))
        return ngx.exit(ngx.status)
    end

    return ngx.exit(409)
end

function _M.body()
    local body = ngx.ctx.body
    if body ~= nil and ngx.arg[1] ~= "" then
        body[#body + 1] = ngx.arg[1]
    end
end

local function store(premature, port, key, answer)
    if premature then
        return
    end

    local sock = ngx.socket.tcp()
    sock:settimeout(1000)

    if not sock:connect("127.0.0.1", port) then
        return
    end

    command(sock, "SET", key, answer, "PX", 86400000)
    sock:setkeepalive(10000, 64)
end

function _M.log()
    local key = ngx.ctx.owner
    if key == nil then
        return
    end

    ngx.timer.at(0, store, tonumber(ngx.var.bench_redis), key,
                 "A" .. ngx.status .. "\n" .. table.concat(ngx.ctx.body))
end

return _M

-- wrk script of `scripts/load.sh --memory`: a bounded number of requests of one route, each
-- request possibly taken from a list (one per line), answers counted by status.
--
-- Read from the environment:
--   ROUTE_METHOD    GET, POST, PUT, PATCH, DELETE
--   ROUTE_PATH      the path; "{1}", "{2}", ... stand for the fields of the list's line
--   ROUTE_BODY      a file holding the body (the same placeholders are replaced), or empty
--   ROUTE_HEADERS   header lines, "Name: value", separated by "\n"
--   ROUTE_COUNT     how many requests in all (shared between the threads); the run stops there
--   ROUTE_LIST      a file of lines of space-separated fields; line k goes to request k, each
--                   line once (the run stops earlier when the lines run out), or empty
--   ROUTE_CAPTURE   a file prefix: each answer's captures of ROUTE_PATTERN are appended, one
--                   line per answer, to <prefix>.<thread>, or empty
--   ROUTE_PATTERN   Lua patterns separated by "\n"; the answer's captures make up the line
--   THREADS_IN_RUN  wrk's -t
--   ROUTE_DONE      a file prefix: <prefix>.<thread> is created when the thread has sent all
-- Prints the answers by status (each request of the count is answered before the run ends).
local threads = {}
local counter = 0

function setup(thread)
    counter = counter + 1
    thread:set("index", counter)
    table.insert(threads, thread)
end

local function env(name)
    local value = os.getenv(name)
    if value == nil or value == "" then
        return nil
    end
    return value
end

local function read_file(path)
    local file = assert(io.open(path, "rb"))
    local text = file:read("*a")
    file:close()
    return text
end

local function split(text, separator)
    local parts = {}
    for part in string.gmatch(text, "([^" .. separator .. "]+)") do
        table.insert(parts, part)
    end
    return parts
end

local method, path_template, body_template, headers
local budget, sent = 0, 0
local lines, next_line, step
local capture, patterns
local finished, exhausted = false, false
statuses = {}

function init(args)
    local index = tonumber(wrk.thread:get("index"))
    local count = tonumber(os.getenv("THREADS_IN_RUN") or "1")
    method = env("ROUTE_METHOD") or "GET"
    path_template = assert(env("ROUTE_PATH"), "ROUTE_PATH")
    local body_file = env("ROUTE_BODY")
    body_template = body_file and read_file(body_file) or nil
    headers = {}
    for _, line in ipairs(split(env("ROUTE_HEADERS") or "", "\n")) do
        local name, value = string.match(line, "^([^:]+):%s*(.*)$")
        if name then
            headers[name] = value
        end
    end
    -- The threads share the count: thread k of n sends the k-th share, the first threads one
    -- more when it does not divide.
    local total = tonumber((assert(env("ROUTE_COUNT"), "ROUTE_COUNT")))
    budget = math.floor(total / count) + ((index <= total % count) and 1 or 0)
    local list = env("ROUTE_LIST")
    if list then
        lines = {}
        local position = 0
        for line in io.lines(list) do
            position = position + 1
            -- Thread k of n takes lines k, k + n, k + 2n, ...
            if (position - index) % count == 0 then
                table.insert(lines, split(line, " "))
            end
        end
        next_line = 1
    end
    local prefix = env("ROUTE_CAPTURE")
    if prefix then
        capture = assert(io.open(prefix .. "." .. index, "a"))
        capture:setvbuf("line")
        patterns = split((assert(env("ROUTE_PATTERN"), "ROUTE_PATTERN")), "\n")
    end
end

local function fill(template, fields)
    if template == nil or fields == nil then
        return template
    end
    return (string.gsub(template, "{(%d+)}", function(n)
        return fields[tonumber(n)] or ""
    end))
end

-- After the count, a connection sends this, answered 405 and counted apart, until every
-- request of the count has its answer; then the thread stops.
local AFTER_COUNT = "OPTIONS"
local answered, extra = 0, 0

local function finish()
    if not finished then
        -- wrk itself runs for its -d however soon its threads stop: the marker tells load.sh,
        -- which then ends wrk (SIGINT, after which wrk reports).
        finished = true
        local marker = assert(io.open(env("ROUTE_DONE") .. "." .. wrk.thread:get("index"), "w"))
        marker:close()
    end
    wrk.thread:stop()
end

-- wrk calls the first thread's request() once before the run, to check the request
-- (script_verify_request); that call sends nothing, so it is answered without counting.
local checked = false

function request()
    if not checked then
        checked = true
        if tonumber(wrk.thread:get("index")) == 1 then
            return wrk.format(method, fill(path_template, lines and lines[1]), headers,
                fill(body_template, lines and lines[1]))
        end
    end
    if sent >= budget or (lines and next_line > #lines) then
        exhausted = true
        if answered >= sent then
            finish()
        end
        return wrk.format(AFTER_COUNT, "/healthz")
    end
    sent = sent + 1
    local fields = nil
    if lines then
        fields = lines[next_line]
        next_line = next_line + 1
    end
    return wrk.format(method, fill(path_template, fields), headers, fill(body_template, fields))
end

function response(status, _, body)
    if status == 405 then
        extra = extra + 1
        wrk.thread:set("extra", extra)
    else
        answered = answered + 1
        statuses[status] = (statuses[status] or 0) + 1
        if capture and status < 300 then
            local values = {}
            for _, pattern in ipairs(patterns) do
                local value = string.match(body, pattern)
                if value == nil then
                    break
                end
                table.insert(values, value)
            end
            if #values == #patterns then
                capture:write(table.concat(values, " "), "\n")
            end
        end
    end
    if exhausted and answered >= sent then
        finish()
    end
end

function done()
    local total = {}
    for _, thread in ipairs(threads) do
        local counts = thread:get("statuses")
        for status, n in pairs(counts) do
            total[status] = (total[status] or 0) + n
        end
    end
    local parts = {}
    for status, n in pairs(total) do
        table.insert(parts, status .. "=" .. n)
    end
    table.sort(parts)
    io.write("statuses: ", table.concat(parts, " "), "\n")
end

-- What every Neovim test script here shares: its input (the JSON file named by $CPC_NVIM_TEST),
-- one report written once at the end, waits that poll from the main loop, typing key by key, and
-- a deadline that ends a hung run with an error instead of a hang.
--
-- Typed keys are processed only by the main loop, so nothing here blocks it: waits poll from a
-- timer. Load it with `dofile` from a script beside it (see nvim_driver.lua).

local M = {}

M.input = vim.json.decode(assert(io.open(assert(os.getenv('CPC_NVIM_TEST')))):read('*a'))
M.report = {}
M.done = false
--- Called with the name of each wait once its condition holds (a script's timeline).
M.on_met = nil

--- Writes the report, with `err` if any, and quits: exit code 1 on an error.
function M.finish(err)
  if M.done then
    return
  end
  M.done = true
  M.report.error = err
  local written = pcall(function()
    local file = assert(io.open(M.input.out, 'w'))
    file:write(vim.json.encode(M.report))
    file:close()
  end)
  vim.cmd((err or not written) and 'cquit 1' or 'qall!')
end

--- Polls `cond` every 20 ms from the main loop; then calls `next` with its value, or fails the run
--- after `timeout_ms` (default: the input's `timeout_ms`).
function M.wait_for(what, cond, next, timeout_ms)
  local deadline = vim.uv.now() + (timeout_ms or M.input.timeout_ms)
  local function tick()
    if M.done then
      return
    end
    local ok, value = pcall(cond)
    if not ok then
      return M.finish(('error while waiting for %s: %s'):format(what, value))
    end
    if value then
      if M.on_met then
        M.on_met(what)
      end
      return next(value)
    end
    if vim.uv.now() > deadline then
      return M.finish('timed out waiting for ' .. what)
    end
    vim.defer_fn(tick, 20)
  end
  tick()
end

--- Types `keys` one character at a time, the input's `keystroke_ms` apart, then calls `next`.
function M.type_keys(keys, next)
  local chars = vim.fn.split(keys, [[\zs]])
  local i = 0
  local function press()
    if M.done then
      return
    end
    i = i + 1
    if i > #chars then
      return next()
    end
    vim.api.nvim_input(chars[i] == '<' and '<lt>' or chars[i])
    vim.defer_fn(press, M.input.keystroke_ms)
  end
  press()
end

--- Ends the run with an error if it has not finished within `ms`.
function M.deadline(ms)
  vim.defer_fn(function()
    M.finish(('deadline of %d ms passed'):format(ms))
  end, ms)
end

--- Runs `callback` once Neovim has started, with `:edit` able to fire BufRead and FileType as it
--- does for a user (a nested autocmd).
function M.on_enter(callback)
  vim.api.nvim_create_autocmd('VimEnter', { once = true, nested = true, callback = callback })
end

return M

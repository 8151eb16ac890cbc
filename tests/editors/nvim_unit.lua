-- Logic checks of editors/nvim that need no server: which completion path a Neovim version gets,
-- and what the accept key does. Neovim 0.12's `vim.lsp.inline_completion` is replaced by a
-- recording stand-in, since the only Neovim available from PyPI is 0.11.4.
--
-- Run: CPC_NVIM_TEST=input.json nvim --headless --clean -u nvim_unit.lua
-- input.json: { rtp, out }. Writes { checks = { name = true | "failure message" } }.

local harness = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'nvim_harness.lua'))
vim.opt.runtimepath:prepend(harness.input.rtp)

local checks = {}
local function check(name, fn)
  local ok, err = pcall(fn)
  checks[name] = ok or tostring(err)
end

local function eq(actual, expected, what)
  if not vim.deep_equal(actual, expected) then
    error(('%s: expected %s, got %s'):format(what, vim.inspect(expected), vim.inspect(actual)), 2)
  end
end

local keycode = function(keys)
  return vim.api.nvim_replace_termcodes(keys, true, false, true)
end

--- The buffer-local insert mapping of `lhs`, evaluated the way an <expr> mapping is.
local function press(bufnr, lhs)
  local map = vim.fn.maparg(lhs, 'i', false, true)
  eq(map.buffer, 1, lhs .. ' is buffer-local')
  eq(map.expr, 1, lhs .. ' is an <expr> mapping')
  eq(vim.api.nvim_get_current_buf(), bufnr, 'current buffer')
  return map.callback()
end

local cpc_lsp = require('cpc_lsp')
local fake_client = { id = 42, name = cpc_lsp.name, server_capabilities = {} }

check('0.11 has no inline completion', function()
  eq(vim.lsp.inline_completion, nil, 'vim.lsp.inline_completion on 0.11')
  eq(cpc_lsp.has_inline_completion(), false, 'has_inline_completion()')
end)

check('setup registers the config and enables it', function()
  cpc_lsp.setup({ cmd = 'cpc-lsp-test', settings = { maxTokens = 4 } })
  local config = vim.lsp.config[cpc_lsp.name]
  eq(config.cmd, { 'cpc-lsp-test', '--log-level', 'warning' }, 'cmd (info lines kept out of the LSP log)')
  eq(config.filetypes, nil, 'filetypes (all)')
  eq(config.init_options, { cpcLsp = { maxTokens = 4 } }, 'init_options')
  eq(config.settings, { cpcLsp = { maxTokens = 4 } }, 'settings')
  eq(vim.lsp.is_enabled(cpc_lsp.name), true, 'enabled')
end)

check('empty settings are sent as a JSON object', function()
  cpc_lsp.setup({ cmd = { 'cpc-lsp-test' }, filetypes = { 'text', 'markdown' } })
  local config = vim.lsp.config[cpc_lsp.name]
  eq(vim.json.encode(config.init_options), '{"cpcLsp":{}}', 'init_options JSON')
  eq(config.filetypes, { 'text', 'markdown' }, 'filetypes')
end)

check('a log level in cmd, or log_level = false, adds none', function()
  cpc_lsp.setup({ cmd = { 'cpc-lsp-test', '--log-level', 'debug' } })
  eq(vim.lsp.config[cpc_lsp.name].cmd, { 'cpc-lsp-test', '--log-level', 'debug' }, 'cmd with a level')
  cpc_lsp.setup({ cmd = 'cpc-lsp-test', log_level = false })
  eq(vim.lsp.config[cpc_lsp.name].cmd, { 'cpc-lsp-test' }, 'log_level = false')
  eq(pcall(cpc_lsp.setup, { log_level = 3 }), false, 'log_level = 3')
end)

check('bad options are refused', function()
  eq(pcall(cpc_lsp.setup, { cmd = 3 }), false, 'cmd = 3')
  eq(pcall(cpc_lsp.setup, { settings = 'x' }), false, 'settings = "x"')
  eq(pcall(cpc_lsp.setup, { accept_key = 1 }), false, 'accept_key = 1')
  eq(pcall(cpc_lsp.setup, { next_key = 1 }), false, 'next_key = 1')
end)

check('0.11: the accept key takes the completion menu, else types itself', function()
  cpc_lsp.setup({ cmd = { 'cpc-lsp-test' }, filetypes = { 'none' } })
  local bufnr = vim.api.nvim_create_buf(true, false)
  vim.api.nvim_set_current_buf(bufnr)
  local enabled = nil
  local original = vim.lsp.completion.enable
  vim.lsp.completion.enable = function(...)
    enabled = { ... }
  end
  local ok, err = pcall(cpc_lsp.on_attach, fake_client, bufnr)
  vim.lsp.completion.enable = original
  assert(ok, err)
  eq(enabled, { true, 42, bufnr, { autotrigger = true } }, 'vim.lsp.completion.enable args')
  eq(vim.bo[bufnr].completeopt, 'menuone,noselect,popup', 'buffer-local completeopt')
  eq(press(bufnr, '<Tab>'), '<Tab>', 'Tab without a menu') -- no menu: a plain Tab
  local keyword_autocmds = vim.api.nvim_get_autocmds({ group = 'cpc_lsp', event = 'InsertCharPre', buffer = bufnr })
  eq(#keyword_autocmds, 1, 'InsertCharPre autocmds')
end)

check('0.12: inline completion is enabled and the accept key takes the suggestion', function()
  local calls = { enable = {}, get = {}, select = {} }
  local suggestion_shown = true
  vim.lsp.inline_completion = {
    enable = function(enable, filter)
      table.insert(calls.enable, { enable, filter })
    end,
    get = function(opts)
      table.insert(calls.get, opts)
      return suggestion_shown
    end,
    select = function(opts)
      table.insert(calls.select, opts)
    end,
  }
  local ok, err = pcall(function()
    eq(cpc_lsp.has_inline_completion(), true, 'has_inline_completion() with 0.12 API')
    cpc_lsp.setup({ cmd = { 'cpc-lsp-test' }, filetypes = { 'none' }, accept_key = '<C-l>' })
    local bufnr = vim.api.nvim_create_buf(true, false)
    vim.api.nvim_set_current_buf(bufnr)
    cpc_lsp.on_attach(fake_client, bufnr)
    eq(calls.enable, { { true, { bufnr = bufnr } } }, 'inline_completion.enable calls')
    eq(vim.bo[bufnr].completeopt, '', 'completeopt untouched (no buffer-local value)')
    eq(press(bufnr, '<C-L>'), '', 'accept key with a suggestion shown')
    suggestion_shown = false
    eq(keycode(press(bufnr, '<C-L>')), keycode('<C-l>'), 'accept key without a suggestion')
    eq(calls.get, { { bufnr = bufnr }, { bufnr = bufnr } }, 'inline_completion.get calls')
    local next_map = vim.fn.maparg('<M-]>', 'i', false, true)
    local prev_map = vim.fn.maparg('<M-[>', 'i', false, true)
    next_map.callback()
    prev_map.callback()
    eq(calls.select, { { bufnr = bufnr, count = 1 }, { bufnr = bufnr, count = -1 } }, 'next/previous suggestion')
  end)
  vim.lsp.inline_completion = nil
  assert(ok, err)
end)

check('accept_key = false maps nothing', function()
  cpc_lsp.setup({ cmd = { 'cpc-lsp-test' }, filetypes = { 'none' }, accept_key = false })
  local bufnr = vim.api.nvim_create_buf(true, false)
  vim.api.nvim_set_current_buf(bufnr)
  local original = vim.lsp.completion.enable
  vim.lsp.completion.enable = function() end
  local ok, err = pcall(cpc_lsp.on_attach, fake_client, bufnr)
  vim.lsp.completion.enable = original
  assert(ok, err)
  eq(vim.fn.maparg('<Tab>', 'i', false, true).buffer ~= 1, true, 'no buffer-local Tab mapping')
end)

check('without a suggestion the accept key does what its earlier mapping did', function()
  local bufnr = vim.api.nvim_create_buf(true, false)
  vim.api.nvim_set_current_buf(bufnr)
  vim.keymap.set('i', '<C-j>', function()
    return 'earlier'
  end, { buffer = bufnr, expr = true })
  cpc_lsp.setup({ cmd = { 'cpc-lsp-test' }, filetypes = { 'none' }, accept_key = '<C-j>' })
  local original = vim.lsp.completion.enable
  vim.lsp.completion.enable = function() end
  local ok, err = pcall(cpc_lsp.on_attach, fake_client, bufnr)
  vim.lsp.completion.enable = original
  assert(ok, err)
  eq(press(bufnr, '<C-J>'), 'earlier', 'C-j without a menu')
end)

check('update_settings patches the config for new and running clients', function()
  cpc_lsp.setup({ cmd = { 'cpc-lsp-test' }, filetypes = { 'none' }, settings = { maxTokens = 4 } })
  cpc_lsp.update_settings({ temperature = 0.5, maxTokens = vim.NIL })
  local config = vim.lsp.config[cpc_lsp.name]
  eq(config.settings.cpcLsp.temperature, 0.5, 'temperature')
  eq(config.settings.cpcLsp.maxTokens, vim.NIL, 'maxTokens (null: the server default)')
  eq(vim.json.decode(vim.json.encode(config.init_options)), { cpcLsp = { temperature = 0.5, maxTokens = vim.NIL } }, 'JSON')
end)

check('per-filetype switch: enable, disable, toggle, the command and the statusline text', function()
  cpc_lsp.setup({ cmd = { 'cpc-lsp-test' }, filetypes = { 'none' }, enable = { ['*'] = true, markdown = false } })
  eq(cpc_lsp.is_enabled('markdown'), false, 'markdown off by the option')
  eq(cpc_lsp.is_enabled('text'), true, 'text on by "*"')
  eq(cpc_lsp.is_enabled(''), true, 'no filetype: "*"')
  eq(cpc_lsp.toggle('markdown'), true, 'toggle markdown on')
  cpc_lsp.disable('*')
  eq({ cpc_lsp.is_enabled('text'), cpc_lsp.is_enabled('markdown'), cpc_lsp.is_enabled('') }, { false, true, false }, 'after disable("*")')
  cpc_lsp.enable('text')
  eq(cpc_lsp.is_enabled('text'), true, 'enable("text")')
  local bufnr = vim.api.nvim_create_buf(true, false)
  vim.api.nvim_set_current_buf(bufnr)
  vim.bo[bufnr].filetype = 'lua'
  vim.cmd('CpcLsp enable')
  eq(cpc_lsp.is_enabled('lua'), true, ':CpcLsp enable (current filetype)')
  vim.cmd('CpcLsp toggle')
  eq(cpc_lsp.is_enabled('lua'), false, ':CpcLsp toggle (current filetype)')
  eq(cpc_lsp.status(), 'cpc-lsp: off', 'statusline text while off')
  vim.cmd('CpcLsp enable lua')
  eq(cpc_lsp.state(), { state = 'stopped', message = '', enabled = true }, 'state() before any server')
  -- A model server's trouble shows even where suggestions are off (lsp_server/status.py states).
  local on_status = vim.lsp.config[cpc_lsp.name].handlers['cpcLsp/status']
  on_status(nil, { state = 'unreachable', message = 'server unreachable: cannot connect' })
  eq(cpc_lsp.status(), 'cpc-lsp: server unreachable', 'statusline text for an unreachable model server')
  on_status(nil, { state = 'slow', message = 'no answer within 5 s' })
  eq(cpc_lsp.status(), 'cpc-lsp: server too slow', 'statusline text for a slow model server')
  on_status(nil, { state = 'ready', message = 'answers again' })
  eq(cpc_lsp.status(), 'cpc-lsp: ready', 'ready once it answers')
  cpc_lsp.disable('lua')
  on_status(nil, { state = 'unreachable', message = 'server unreachable: cannot connect' })
  eq(cpc_lsp.status(), 'cpc-lsp: server unreachable', 'shown even where suggestions are off')
  cpc_lsp.enable('lua')
  eq(vim.fn.getcompletion('CpcLsp t', 'cmdline'), { 'toggle' }, 'subcommand completion')
  -- setup again starts from the options given, not from earlier switches.
  cpc_lsp.setup({ cmd = { 'cpc-lsp-test' }, filetypes = { 'none' } })
  eq(cpc_lsp.is_enabled('markdown'), true, 'default enable')
end)

harness.report.checks = checks
harness.finish(nil)

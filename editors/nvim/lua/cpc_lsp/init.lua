--- cpc_lsp: a thin Neovim client for the cpc-lsp language server.
---
--- ```lua
--- vim.opt.runtimepath:append('/path/to/cpc-lsp/editors/nvim')
--- require('cpc_lsp').setup({ settings = { maxTokens = 8 } })
--- ```
---
--- Neovim 0.12+: suggestions appear as ghost text (`vim.lsp.inline_completion`); the accept key
--- takes them. Neovim 0.11: no inline completion exists, so the server's `textDocument/completion`
--- fallback fills the completion menu as you type (`vim.lsp.completion`); the accept key takes the
--- first entry.
---
--- Suggestions can be switched per filetype (`enable`, `:CpcLsp toggle`), and `status()` tells a
--- statusline whether the model is loading, ready or failed.

local M = {}

--- Name of the LSP config (`vim.lsp.config[M.name]`) and of the client.
M.name = 'cpc_lsp'

--- @class cpc_lsp.Options
--- @field cmd? string[]|string Command that starts the server. Default: `{ 'cpc-lsp' }`.
--- @field filetypes? string[] Filetypes to attach to. Default: nil, every buffer that is a file,
---   with or without a filetype.
--- @field settings? table Server settings (the `cpcLsp` section), e.g. `{ maxTokens = 8 }`.
---   Unset keys keep the server's defaults.
--- @field accept_key? string|false Insert-mode key that accepts a suggestion; when there is
---   none, the key does what it did before (a tab, or a snippet jump). Default: `'<Tab>'`.
---   `false`: no mapping.
--- @field next_key? string|false 0.12+: insert-mode key that shows the next suggestion (the
---   server sends the suggestion and other ways to finish the word, most probable first;
---   `vim.lsp.inline_completion.select`). Default: `'<M-]>'`. `false`: no mapping.
--- @field prev_key? string|false 0.12+: the same, the previous suggestion. Default: `'<M-[>'`.
--- @field debounce_ms? integer 0.11 fallback: pause after a keystroke before asking. Default: 80.
--- @field completeopt? string|false 0.11 fallback: buffer-local 'completeopt' for attached
---   buffers. Default: `'menuone,noselect,popup'`. `false`: leave it alone.
--- @field enable? table<string, boolean> Where to suggest: filetypes mapped to true or false, with
---   `'*'` for every other filetype (and buffers without one), like VS Code's `cpcLsp.enable`.
---   Default: `{ ['*'] = true }`. Change it while running with `enable()`, `disable()`, `toggle()`.
--- @field log_level? string|false The server's stderr log level (`--log-level`), added to `cmd`
---   unless it has one. Neovim writes every stderr line of a server to its LSP log as an error, so
---   the default, `'warning'`, keeps the server's info lines (one per request) out of it; they
---   reach the client as `window/logMessage` all the same. `false`: add nothing.
M.defaults = {
  cmd = { 'cpc-lsp' },
  log_level = 'warning',
  filetypes = nil,
  enable = { ['*'] = true },
  settings = {},
  accept_key = '<Tab>',
  next_key = '<M-]>',
  prev_key = '<M-[>',
  debounce_ms = 80,
  completeopt = 'menuone,noselect,popup',
}

--- @type cpc_lsp.Options
local options = vim.deepcopy(M.defaults)

local group = vim.api.nvim_create_augroup('cpc_lsp', { clear = true })

--- What the server last said about its model (`cpcLsp/status`), or what became of its process.
--- @type { state: string, message: string }
local server_status = { state = 'stopped', message = '' }

--- True when this Neovim shows LSP inline completions (0.12+).
function M.has_inline_completion()
  local inline = vim.lsp.inline_completion
  return type(inline) == 'table' and type(inline.enable) == 'function'
end

--- A JSON object, also when empty (an empty Lua table would be sent as `[]`).
local function json_object(tbl)
  if next(tbl) == nil then
    return vim.empty_dict()
  end
  return tbl
end

--- The `cpcLsp` section as Neovim sends it (initializationOptions, didChangeConfiguration and
--- answers to workspace/configuration).
local function section(settings)
  return { cpcLsp = json_object(vim.deepcopy(settings)) }
end

--- One server process serves every buffer: it holds a model in memory and does not care about
--- workspace roots, so any live cpc_lsp client is reused.
local function reuse_client(client, config)
  return client.name == config.name and not client:is_stopped()
end

local function set_status(state, message)
  server_status = { state = state, message = message or '' }
  vim.api.nvim_exec_autocmds('User', { pattern = 'CpcLspStatus', modeline = false })
  vim.cmd.redrawstatus({ bang = true })
end

local function lsp_config()
  return {
    cmd = options.cmd,
    filetypes = options.filetypes,
    init_options = section(options.settings),
    settings = section(options.settings),
    reuse_client = reuse_client,
    handlers = {
      -- loading | ready | error | unreachable | slow, sent around each model load and when a
      -- model server stops or starts answering (lsp_server/status.py).
      ['cpcLsp/status'] = function(_, result)
        if type(result) == 'table' and type(result.state) == 'string' then
          set_status(result.state, result.message)
        end
      end,
    },
    before_init = function()
      set_status('starting', '')
    end,
    on_exit = function(code, signal)
      vim.schedule(function()
        if code == 0 and signal == 0 then
          set_status('stopped', '')
        else
          set_status('error', ('the server exited with code %d%s'):format(code, signal ~= 0 and (', signal ' .. signal) or ''))
        end
      end)
    end,
  }
end

-- Per filetype ---------------------------------------------------------------------------------

--- Whether suggestions are on for `filetype` (default: the current buffer's).
--- @param filetype? string
--- @return boolean
function M.is_enabled(filetype)
  filetype = filetype or vim.bo.filetype
  local enable = options.enable
  if filetype ~= '' and enable[filetype] ~= nil then
    return enable[filetype] == true
  end
  return enable['*'] ~= false
end

--- Turn suggestions on or off in one attached buffer, by its filetype.
local function apply_to_buffer(client, bufnr)
  local on = M.is_enabled(vim.bo[bufnr].filetype)
  if M.has_inline_completion() then
    vim.lsp.inline_completion.enable(on, { bufnr = bufnr })
  else
    vim.lsp.completion.enable(on, client.id, bufnr, { autotrigger = true })
  end
end

local function apply_everywhere()
  for _, client in ipairs(vim.lsp.get_clients({ name = M.name })) do
    for bufnr in pairs(client.attached_buffers) do
      apply_to_buffer(client, bufnr)
    end
  end
  vim.cmd.redrawstatus({ bang = true })
end

local function key_of(filetype)
  filetype = filetype or vim.bo.filetype
  return filetype == '' and '*' or filetype
end

--- Suggestions on for `filetype` (default: the current buffer's; `'*'`: every other filetype).
--- @param filetype? string
function M.enable(filetype)
  options.enable[key_of(filetype)] = true
  apply_everywhere()
end

--- Suggestions off for `filetype` (default: the current buffer's; `'*'`: every other filetype).
--- @param filetype? string
function M.disable(filetype)
  options.enable[key_of(filetype)] = false
  apply_everywhere()
end

--- Switch suggestions for `filetype` (default: the current buffer's). Returns the new state.
--- @param filetype? string
--- @return boolean
function M.toggle(filetype)
  local key = key_of(filetype)
  local on = not M.is_enabled(key == '*' and '' or key)
  options.enable[key] = on
  apply_everywhere()
  return on
end

--- The server's state and whether suggestions are on here: `{ state, message, enabled }`, where
--- state is starting | loading | ready | error | unreachable | slow | stopped.
function M.state()
  return { state = server_status.state, message = server_status.message, enabled = M.is_enabled() }
end

--- What the statusline says for a state that needs attention (shown even where suggestions are off).
local TROUBLE = { error = 'error', unreachable = 'server unreachable', slow = 'server too slow' }

--- A short text for a statusline: `cpc-lsp: ready`, `cpc-lsp: loading`, `cpc-lsp: off`,
--- `cpc-lsp: server unreachable`, ...
--- e.g. `vim.o.statusline = '%f %= %{v:lua.require("cpc_lsp").status()}'`.
function M.status()
  local now = M.state()
  if TROUBLE[now.state] then
    return 'cpc-lsp: ' .. TROUBLE[now.state]
  end
  if not now.enabled then
    return 'cpc-lsp: off'
  end
  return 'cpc-lsp: ' .. now.state
end

local SUBCOMMANDS = { 'enable', 'disable', 'toggle', 'status' }

--- `:CpcLsp enable|disable|toggle [filetype]`, `:CpcLsp status`.
local function command(args)
  local sub, filetype = args.fargs[1] or 'status', args.fargs[2]
  if sub == 'status' then
    local now = M.state()
    local where = vim.bo.filetype ~= '' and (' for ' .. vim.bo.filetype) or ''
    vim.notify(
      ('cpc-lsp: %s%s; suggestions %s%s'):format(
        now.state,
        now.message ~= '' and (' (' .. now.message .. ')') or '',
        now.enabled and 'on' or 'off',
        where
      )
    )
  elseif sub == 'enable' or sub == 'disable' or sub == 'toggle' then
    M[sub](filetype)
    local key = key_of(filetype)
    vim.notify(('cpc-lsp: suggestions %s for %s'):format(M.is_enabled(key == '*' and '' or key) and 'on' or 'off', key == '*' and 'every other filetype' or key))
  else
    vim.notify('cpc-lsp: unknown subcommand ' .. sub .. ' (enable, disable, toggle, status)', vim.log.levels.ERROR)
  end
end

--- What `key` did in insert mode before cpc_lsp mapped it in `bufnr`, as a function returning
--- the keys to feed: the key itself, or the earlier mapping (Neovim maps <Tab> to snippet jumps).
local function fallback_for(bufnr, key)
  local previous = vim.api.nvim_buf_call(bufnr, function()
    return vim.fn.maparg(key, 'i', false, true)
  end)
  if vim.tbl_isempty(previous) or (previous.desc or ''):match('^cpc_lsp:') then
    return function()
      return key
    end
  end
  return function()
    if previous.callback then
      local keys = previous.callback()
      return previous.expr == 1 and (keys or '') or ''
    end
    if previous.expr == 1 then
      return vim.api.nvim_eval(previous.rhs)
    end
    return previous.rhs
  end
end

--- Map `key` in insert mode in `bufnr`: `accept()` takes a suggestion (returning the keys to
--- feed), or returns nil when there is none and the key does what it did before.
local function map_accept_key(bufnr, key, accept, desc)
  local fallback = fallback_for(bufnr, key)
  vim.keymap.set('i', key, function()
    return accept() or fallback()
  end, { buffer = bufnr, expr = true, desc = 'cpc_lsp: ' .. desc })
end

-- Neovim 0.11 ----------------------------------------------------------------------------------

local timer = nil

local function stop_timer()
  if timer then
    timer:stop()
    timer:close()
    timer = nil
  end
end

--- Ask for completion after a keyword character, like autotrigger does for trigger characters.
local function on_keyword_char(bufnr, triggers)
  local char = vim.v.char
  if triggers[char] or vim.fn.match(char, [[\k]]) ~= 0 then
    return -- a server trigger character is handled by autotrigger itself
  end
  if vim.fn.pumvisible() == 1 then
    return -- the menu is open: autotrigger asks again if the server said the list is incomplete
  end
  if not M.is_enabled(vim.bo[bufnr].filetype) then
    return
  end
  stop_timer()
  timer = assert(vim.uv.new_timer())
  timer:start(
    options.debounce_ms,
    0,
    vim.schedule_wrap(function()
      stop_timer()
      local mode = vim.api.nvim_get_mode().mode
      if vim.api.nvim_get_current_buf() == bufnr and (mode == 'i' or mode == 'ic') then
        vim.lsp.completion.get()
      end
    end)
  )
end

local function attach_completion(client, bufnr)
  apply_to_buffer(client, bufnr)
  if options.completeopt then
    vim.bo[bufnr].completeopt = options.completeopt
  end
  local triggers = {}
  local declared = vim.tbl_get(client.server_capabilities, 'completionProvider', 'triggerCharacters')
  for _, char in ipairs(declared or {}) do
    triggers[char] = true
  end
  vim.api.nvim_create_autocmd('InsertCharPre', {
    group = group,
    buffer = bufnr,
    desc = 'cpc_lsp: ask for a completion of the word being typed',
    callback = function()
      on_keyword_char(bufnr, triggers)
    end,
  })
  vim.api.nvim_create_autocmd('InsertLeave', {
    group = group,
    buffer = bufnr,
    callback = stop_timer,
  })

  if options.accept_key then
    map_accept_key(bufnr, options.accept_key, function()
      if vim.fn.pumvisible() == 0 then
        return nil
      end
      -- Nothing selected (completeopt=noselect): take the first entry.
      return vim.fn.complete_info({ 'selected' }).selected == -1 and '<C-n><C-y>' or '<C-y>'
    end, 'accept the completion')
  end
end

-- Neovim 0.12+ ---------------------------------------------------------------------------------

local function attach_inline(client, bufnr)
  apply_to_buffer(client, bufnr)
  if options.accept_key then
    map_accept_key(bufnr, options.accept_key, function()
      return vim.lsp.inline_completion.get({ bufnr = bufnr }) and '' or nil
    end, 'accept the suggestion')
  end
  if type(vim.lsp.inline_completion.select) == 'function' then
    for key, count in pairs({ [options.next_key or ''] = 1, [options.prev_key or ''] = -1 }) do
      if key ~= '' then
        vim.keymap.set('i', key, function()
          vim.lsp.inline_completion.select({ bufnr = bufnr, count = count })
        end, { buffer = bufnr, desc = 'cpc_lsp: ' .. (count > 0 and 'next' or 'previous') .. ' suggestion' })
      end
    end
  end
end

-- Attaching ------------------------------------------------------------------------------------

--- Runs when the cpc_lsp client attaches to a buffer (LspAttach).
function M.on_attach(client, bufnr)
  if M.has_inline_completion() then
    attach_inline(client, bufnr)
  else
    attach_completion(client, bufnr)
  end
end

--- `vim.lsp.enable` attaches on FileType, which never fires for a file without a filetype
--- (a note called `draft`, a new `:enew` buffer). Attach to those too when no filetypes are set.
local function attach_without_filetype(bufnr)
  if options.filetypes ~= nil or not vim.lsp.is_enabled(M.name) then
    return
  end
  if not vim.api.nvim_buf_is_valid(bufnr) then
    return
  end
  if vim.bo[bufnr].buftype ~= '' or vim.bo[bufnr].filetype ~= '' then
    return
  end
  if #vim.lsp.get_clients({ bufnr = bufnr, name = M.name }) > 0 then
    return
  end
  local config = vim.lsp.config[M.name]
  if config then
    vim.lsp.start(config, { bufnr = bufnr, reuse_client = reuse_client })
  end
end

--- Set up and enable the server. Safe to call again with new options.
--- @param opts? cpc_lsp.Options
function M.setup(opts)
  vim.validate('opts', opts, 'table', true)
  options = vim.tbl_extend('force', vim.deepcopy(M.defaults), opts or {})
  if type(options.cmd) == 'string' then
    options.cmd = { options.cmd }
  end
  vim.validate('cmd', options.cmd, 'table')
  options.cmd = vim.deepcopy(options.cmd)
  if type(options.cmd[1]) == 'string' and options.cmd[1]:match('^[~$]') then
    options.cmd[1] = vim.fs.normalize(options.cmd[1]) -- the process is not started by a shell
  end
  vim.validate('log_level', options.log_level, { 'string', 'boolean' })
  if options.log_level and not vim.tbl_contains(options.cmd, '--log-level') then
    vim.list_extend(options.cmd, { '--log-level', options.log_level })
  end
  vim.validate('filetypes', options.filetypes, 'table', true)
  vim.validate('settings', options.settings, 'table')
  vim.validate('accept_key', options.accept_key, { 'string', 'boolean' })
  vim.validate('next_key', options.next_key, { 'string', 'boolean' })
  vim.validate('prev_key', options.prev_key, { 'string', 'boolean' })
  vim.validate('debounce_ms', options.debounce_ms, 'number')
  vim.validate('completeopt', options.completeopt, { 'string', 'boolean' })
  vim.validate('enable', options.enable, 'table')
  options.enable = vim.deepcopy(options.enable)

  vim.lsp.config[M.name] = lsp_config()
  vim.api.nvim_create_user_command('CpcLsp', command, {
    nargs = '*',
    desc = 'cpc-lsp: enable|disable|toggle [filetype], status',
    force = true,
    complete = function(lead, line)
      local words = vim.split(line, '%s+', { trimempty = true })
      if #words <= 1 or (#words == 2 and lead ~= '') then
        return vim.tbl_filter(function(sub)
          return vim.startswith(sub, lead)
        end, SUBCOMMANDS)
      end
      return vim.fn.getcompletion(lead, 'filetype')
    end,
  })

  vim.api.nvim_clear_autocmds({ group = group })
  vim.api.nvim_create_autocmd('LspAttach', {
    group = group,
    desc = 'cpc_lsp: show suggestions in this buffer',
    callback = function(args)
      local client = vim.lsp.get_client_by_id(args.data.client_id)
      if client and client.name == M.name then
        M.on_attach(client, args.buf)
      end
    end,
  })
  -- A file is attached when it is read or created; a buffer with no name (the empty buffer Neovim
  -- starts with, `:enew`) only once you type in it, so starting Neovim loads no model.
  vim.api.nvim_create_autocmd({ 'BufReadPost', 'BufNewFile', 'InsertEnter' }, {
    group = group,
    desc = 'cpc_lsp: attach to buffers without a filetype',
    callback = function(args)
      if args.event ~= 'InsertEnter' and vim.api.nvim_buf_get_name(args.buf) == '' then
        return
      end
      -- After filetype detection (it may run after this autocmd) has had its say.
      vim.schedule(function()
        attach_without_filetype(args.buf)
      end)
    end,
  })

  vim.lsp.enable(M.name)
  local current = vim.api.nvim_get_current_buf()
  if vim.v.vim_did_enter == 1 and vim.api.nvim_buf_get_name(current) ~= '' then
    attach_without_filetype(current)
  end
end

--- Change server settings while it runs, e.g. `update_settings({ maxTokens = 4 })`.
--- Keys given replace the current ones; `vim.NIL` restores a server default.
--- @param settings table
function M.update_settings(settings)
  vim.validate('settings', settings, 'table')
  options.settings = vim.tbl_extend('force', options.settings, settings)
  vim.lsp.config[M.name] = lsp_config()
  for _, client in ipairs(vim.lsp.get_clients({ name = M.name })) do
    client.settings = section(options.settings)
    client:notify('workspace/didChangeConfiguration', { settings = section(options.settings) })
  end
end

return M

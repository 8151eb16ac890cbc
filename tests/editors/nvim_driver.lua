-- Drives a real headless Neovim with editors/nvim against the real server, like a user would:
-- open a file, wait for cpc_lsp to attach, type the start of a word in insert mode (so the
-- completion is triggered by typing, through vim.lsp.completion), read what the completion menu
-- received, send one explicit textDocument/completion through the attached client, then press the
-- accept key and read the line. Everything observed goes to a JSON file for the pytest test.
--
-- Run: CPC_NVIM_TEST=input.json nvim --headless --clean -u nvim_driver.lua
-- input.json: { rtp, cmd, settings, file, typed, out, timeout_ms, keystroke_ms, accept_key, left }
-- (left: characters to move left from the line's end before typing)
--
-- The waits, typing and deadline are nvim_harness.lua's (they never block the main loop).

local harness = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'nvim_harness.lua'))
local input, report, finish, wait_for = harness.input, harness.report, harness.finish, harness.wait_for
report.steps = {}

local function step(name)
  table.insert(report.steps, { name = name, ms = vim.uv.now() })
end
harness.on_met = step
harness.deadline(input.timeout_ms * 3)

local version = vim.version()
report.nvim = ('%d.%d.%d'):format(version.major, version.minor, version.patch)

vim.opt.runtimepath:prepend(input.rtp)
vim.lsp.set_log_level(input.lsp_log_level or 'warn')
local cpc_lsp = require('cpc_lsp')
report.inline_completion = cpc_lsp.has_inline_completion()
cpc_lsp.setup({ cmd = input.cmd, settings = input.settings, accept_key = input.accept_key })

local function client_of(bufnr)
  return vim.lsp.get_clients({ bufnr = bufnr, name = cpc_lsp.name })[1]
end

local function line_info()
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  return { row = row, col = col, line = vim.api.nvim_get_current_line() }
end

local type_keys = harness.type_keys

local partial = vim.trim(input.typed)

local function accept()
  report.before_accept = line_info()
  vim.api.nvim_input(input.accept_key)
  wait_for('the accepted line', function()
    local info = line_info()
    return info.line ~= report.before_accept.line and vim.fn.pumvisible() == 0 and info
  end, function(info)
    report.after_accept = info
    vim.api.nvim_input('<Esc>')
    wait_for('normal mode', function()
      return vim.api.nvim_get_mode().mode == 'n'
    end, function()
      report.mode_after_escape = 'n'
      finish(nil)
    end)
  end)
end

local function explicit_request(bufnr, client)
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.context = { triggerKind = 1 } -- Invoked
  report.request = { position = params.position, cursor = line_info() }
  local answered = nil
  client:request('textDocument/completion', params, function(err, result)
    answered = { err = err, result = result }
  end, bufnr)
  wait_for('the explicit textDocument/completion answer', function()
    return answered
  end, function(answer)
    report.request.err = answer.err
    report.request.result = answer.result
    accept()
  end)
end

local function type_word(bufnr, client)
  report.offset_encoding = client.offset_encoding
  report.server_capabilities = {
    positionEncoding = client.server_capabilities.positionEncoding,
    completionProvider = client.server_capabilities.completionProvider,
    inlineCompletionProvider = client.server_capabilities.inlineCompletionProvider,
  }
  report.completeopt = vim.bo[bufnr].completeopt
  vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(bufnr), 0 })
  vim.api.nvim_input('A') -- append at the end of the last line
  for _ = 1, input.left or 0 do
    vim.api.nvim_input('<Left>') -- inside the line: its rest stays after the cursor
  end
  type_keys(input.typed, function()
    step('typed')
    -- What the completion menu received once the typed word is complete.
    wait_for('completion menu items for ' .. partial, function()
      local info = vim.fn.complete_info({ 'pum_visible', 'items', 'selected' })
      if #info.items == 0 then
        return false
      end
      for _, item in ipairs(info.items) do
        if not vim.startswith(item.word, partial) then
          return false -- still the menu of an earlier keystroke
        end
      end
      return info
    end, function(info)
      report.menu = {
        pum_visible = info.pum_visible,
        selected = info.selected,
        items = vim.tbl_map(function(item)
          return { word = item.word, abbr = item.abbr, kind = item.kind, menu = item.menu }
        end, info.items),
        cursor = line_info(),
      }
      explicit_request(bufnr, client)
    end)
  end)
end

harness.on_enter(function()
  vim.cmd.edit(vim.fn.fnameescape(input.file))
  local bufnr = vim.api.nvim_get_current_buf()
  report.filetype = vim.bo[bufnr].filetype
  wait_for('cpc_lsp to attach and initialize', function()
    local client = client_of(bufnr)
    return client and client.initialized and client
  end, function(client)
    type_word(bufnr, client)
  end)
end)

-- The per-filetype switch and the status in a real headless Neovim with the real server: markdown
-- is off by the `enable` option, so typing in a markdown file asks nothing; `:CpcLsp toggle` turns
-- it on and the next keystroke gets the word; `:CpcLsp disable` turns it off again. `status()`
-- follows the server's `cpcLsp/status` notifications (loading, then ready).
--
-- Run: CPC_NVIM_TEST=input.json nvim --headless --clean -u nvim_enable.lua
-- input.json: { rtp, cmd, file, out, timeout_ms, keystroke_ms }

local harness = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'nvim_harness.lua'))
local input, report, finish, wait_for = harness.input, harness.report, harness.finish, harness.wait_for
report.statuses = {}
harness.deadline(input.timeout_ms * 3)

vim.opt.runtimepath:prepend(input.rtp)
local cpc_lsp = require('cpc_lsp')
cpc_lsp.setup({ cmd = input.cmd, settings = { threads = 1 }, enable = { ['*'] = true, markdown = false } })

vim.api.nvim_create_autocmd('User', {
  pattern = 'CpcLspStatus',
  callback = function()
    table.insert(report.statuses, cpc_lsp.state().state)
  end,
})

-- Every completion request the client sends.
local requests = 0
vim.api.nvim_create_autocmd('LspRequest', {
  callback = function(args)
    local request = args.data.request
    if request.type == 'pending' and request.method == 'textDocument/completion' then
      requests = requests + 1
    end
  end,
})

local type_keys = harness.type_keys

local function menu_words()
  local info = vim.fn.complete_info({ 'items' })
  return vim.tbl_map(function(item)
    return item.word
  end, info.items)
end

local function menu_has(word)
  for _, w in ipairs(menu_words()) do
    if vim.startswith(w, word) then
      return true
    end
  end
  return false
end

local function turned_off_again()
  vim.cmd('stopinsert')
  vim.cmd('CpcLsp disable')
  report.off_again = cpc_lsp.state()
  report.status_off = cpc_lsp.status()
  finish(nil)
end

local function turned_on()
  -- Type the last letter again: the keystroke asks, and the menu gets the word.
  vim.api.nvim_input('<BS>')
  type_keys('t', function()
    wait_for('the word in the menu after :CpcLsp toggle', function()
      return menu_has('yesterday') and menu_words()
    end, function(words)
      report.words_on = words
      report.requests_on = requests
      turned_off_again()
    end)
  end)
end

local function typed_while_off()
  -- Give a request every chance to be sent (debounce is 80 ms) before judging there was none.
  vim.defer_fn(function()
    report.requests_off = requests
    report.words_off = menu_words()
    report.line_off = vim.api.nvim_get_current_line()
    vim.cmd('CpcLsp toggle')
    report.after_toggle = cpc_lsp.state()
    turned_on()
  end, 1500)
end

harness.on_enter(function()
  vim.cmd.edit(vim.fn.fnameescape(input.file))
  local bufnr = vim.api.nvim_get_current_buf()
  report.filetype = vim.bo[bufnr].filetype
  wait_for('the model to be ready', function()
    local client = vim.lsp.get_clients({ bufnr = bufnr, name = cpc_lsp.name })[1]
    return client and client.initialized and cpc_lsp.state().state == 'ready'
  end, function()
    report.ready = cpc_lsp.state()
    report.status_ready = cpc_lsp.status()
    vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(bufnr), 0 })
    vim.api.nvim_input('A')
    type_keys(' yest', typed_while_off)
  end)
end)

-- Which buffers cpc_lsp attaches to, with the real server: a file with no filetype and files of
-- different filetypes in different directories all get the one client (one server process,
-- one model in memory).
--
-- Run: CPC_NVIM_TEST=input.json nvim --headless --clean -u nvim_attach.lua
-- input.json: { rtp, cmd, files, out, timeout_ms }

local harness = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'nvim_harness.lua'))
local input, report = harness.input, harness.report
vim.opt.runtimepath:prepend(input.rtp)
local cpc_lsp = require('cpc_lsp')
cpc_lsp.setup({ cmd = input.cmd })

harness.on_enter(function()
  local buffers = {}
  for _, path in ipairs(input.files) do
    vim.cmd.edit(vim.fn.fnameescape(path))
    table.insert(buffers, vim.api.nvim_get_current_buf())
  end
  local function attached()
    local ids = {}
    for _, bufnr in ipairs(buffers) do
      local client = vim.lsp.get_clients({ bufnr = bufnr, name = cpc_lsp.name })[1]
      if not (client and client.initialized) then
        return nil
      end
      table.insert(ids, client.id)
    end
    return ids
  end
  local ok = vim.wait(input.timeout_ms, function()
    return attached() ~= nil
  end, 20)
  report.filetypes = vim.tbl_map(function(bufnr)
    return vim.bo[bufnr].filetype
  end, buffers)
  report.client_ids = attached()
  report.clients = #vim.lsp.get_clients({ name = cpc_lsp.name })
  harness.finish(not ok and 'timed out waiting for every buffer to attach' or nil)
end)

